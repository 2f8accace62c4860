// 2,000 requests of random lengths, random cancellations, a tiny pool: every
// request that was not cancelled finishes with the tokens it gets alone, the
// pool ends fully free and the loop thread ends.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <random>
#include <thread>

#include "batching_test_util.h"

namespace loom::batching {
namespace {

using testing::alone;
using testing::load_fixture;
using testing::make_runner;
using testing::random_tokens;

TEST(Stress, TwoThousandRequestsTinyPoolRandomCancellations) {
  auto model = load_fixture("qwen2_sliding-f32");  // hybrid: one full layer, two sliding ones
  auto runner = make_runner(model);
  std::mt19937 rng(2000);
  // 120 distinct (prompt, max_new_tokens) shapes, drawn 2,000 times.
  struct Shape {
    std::vector<int32_t> prompt;
    int64_t max_new;
    std::vector<int32_t> expected;
  };
  std::vector<Shape> shapes;
  for (int i = 0; i < 120; ++i) {
    Shape s;
    s.prompt = random_tokens(rng, 1 + static_cast<int64_t>(rng() % 14), model->vocab_size());
    s.max_new = 1 + static_cast<int64_t>(rng() % 5);
    s.expected = alone(*runner, s.prompt, s.max_new);
    shapes.push_back(std::move(s));
  }
  ContinuousBatchingConfig cfg;
  cfg.page_size = 4;
  cfg.num_blocks = 24;  // ~96 positions of a full layer: constant preemption
  cfg.max_batch_tokens = 32;
  cfg.use_async_batching = true;
  cfg.cpu_offload_space = 1.0 / 4096;  // 256 KiB of host swap: some swaps, some recomputes
  // fifo's default safety margin (20% of the pool) keeps admission so careful that a fast
  // loop could finish every request without running out (CI on a fast machine did, once):
  // with none, fifo admits as much as fits and running requests must preempt to grow.
  cfg.safety_margin = 0.0;
  auto m = ContinuousBatchingManager::create(runner, testing::no_eos_config(), cfg).value();

  constexpr int kRequests = 2000;
  std::vector<int> shape_of(kRequests);
  std::vector<bool> cancel(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    shape_of[static_cast<size_t>(i)] = static_cast<int>(rng() % shapes.size());
    cancel[static_cast<size_t>(i)] = rng() % 7 == 0;
  }
  // The first requests are queued before the loop starts, so the tiny pool is
  // oversubscribed from the first step whatever the threads' timing: when the
  // producer alone fed the loop, a fast loop sometimes never ran out of pages and
  // nothing was preempted (the check below failed ~1 run in 10).
  constexpr int kQueuedBeforeStart = 200;
  for (int i = 0; i < kQueuedBeforeStart; ++i) {
    RequestOptions o;
    o.request_id = std::to_string(i);
    o.max_new_tokens = shapes[static_cast<size_t>(shape_of[static_cast<size_t>(i)])].max_new;
    ASSERT_TRUE(m->add_request(shapes[static_cast<size_t>(shape_of[static_cast<size_t>(i)])].prompt, o).ok());
    cancel[static_cast<size_t>(i)] = false;  // only the producer's requests are cancelled
  }
  ASSERT_TRUE(m->start().ok());
  // A producer adds the other requests and cancels some of them soon after.
  std::thread producer([&] {
    std::mt19937 prng(5);
    std::vector<std::string> to_cancel;
    for (int i = kQueuedBeforeStart; i < kRequests; ++i) {
      RequestOptions o;
      o.request_id = std::to_string(i);
      o.max_new_tokens = shapes[static_cast<size_t>(shape_of[static_cast<size_t>(i)])].max_new;
      ASSERT_TRUE(m->add_request(shapes[static_cast<size_t>(shape_of[static_cast<size_t>(i)])].prompt, o).ok());
      if (cancel[static_cast<size_t>(i)]) to_cancel.push_back(o.request_id.value());
      if (!to_cancel.empty() && prng() % 3 == 0) {
        const Status s = m->cancel_request(to_cancel.front());
        EXPECT_TRUE(s.ok() || s.code() == ErrorCode::kNotFound) << s.to_string();  // NotFound: it already ended
        to_cancel.erase(to_cancel.begin());
      }
    }
    for (const std::string& id : to_cancel) (void)m->cancel_request(id);
  });

  int finished = 0, cancelled = 0;
  for (int n = 0; n < kRequests; ++n) {
    std::optional<GenerationOutput> out = m->get_result(std::nullopt, 120.0);
    ASSERT_TRUE(out.has_value()) << "no result after " << n;
    const int i = std::stoi(out->request_id);
    const Shape& s = shapes[static_cast<size_t>(shape_of[static_cast<size_t>(i)])];
    if (out->cancelled()) {
      EXPECT_TRUE(cancel[static_cast<size_t>(i)]) << i;
      // What it had generated before the cancel is a prefix of the right answer.
      EXPECT_TRUE(std::equal(out->generated_tokens.begin(), out->generated_tokens.end(), s.expected.begin()));
      ++cancelled;
      continue;
    }
    ASSERT_EQ(out->status, RequestStatus::kFinished) << i << ": " << out->error;
    EXPECT_EQ(out->generated_tokens, s.expected) << "request " << i;
    ++finished;
  }
  producer.join();
  EXPECT_EQ(finished + cancelled, kRequests);
  EXPECT_GT(cancelled, 0);
  ASSERT_TRUE(m->stop(true, 60.0, /*keep_for_next_session=*/true).ok());
  EXPECT_TRUE(m->join(0.0).ok());
  EXPECT_FALSE(m->is_running());
  const ManagerStats st = m->stats();
  EXPECT_EQ(st.pages_in_use, 0);  // sliding layers: no prefix cache, so nothing stays
  EXPECT_EQ(st.swap_pages_in_use, 0);
  EXPECT_LE(st.peak_pages_in_use, st.pages_capacity);
  EXPECT_GT(st.preempted_recompute + st.preempted_swap, 0);
  std::cerr << "preempted: " << st.preempted_recompute << " by recompute, " << st.preempted_swap << " by swap\n";
  EXPECT_EQ(st.finished, finished);
  EXPECT_EQ(st.cancelled, cancelled);
  EXPECT_FALSE(m->get_result(std::nullopt, 0.0).has_value());
  m->destroy();
}

}  // namespace
}  // namespace loom::batching
