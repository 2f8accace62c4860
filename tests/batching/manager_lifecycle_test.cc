// The manager's API around the loop: cancellation, stop (hard vs flush), pause
// with concurrent producers, result handlers and iterators, backpressure, bad
// requests, destroy.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <random>
#include <set>
#include <thread>

#include "batching_test_util.h"
#include "loom/runtime/op_profile.h"

namespace loom::batching {
namespace {

using testing::alone;
using testing::load_fixture;
using testing::make_runner;
using testing::random_tokens;

class ManagerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = load_fixture("llama-f32");
    runner_ = make_runner(model_);
  }
  static void TearDownTestSuite() {
    runner_.reset();
    model_.reset();
  }
  std::unique_ptr<ContinuousBatchingManager> manager(ContinuousBatchingConfig c = {}, ManagerOptions o = {}) {
    if (!c.num_blocks) c.num_blocks = 64;
    c.page_size = c.page_size == 256 ? 16 : c.page_size;
    return ContinuousBatchingManager::create(runner_, testing::no_eos_config(), c, std::move(o)).value();
  }
  std::vector<int32_t> prompt(int n, uint32_t seed = 1) {
    std::mt19937 rng(seed);
    return random_tokens(rng, n, model_->vocab_size());
  }
  static std::shared_ptr<const models::Model> model_;
  static std::shared_ptr<ModelRunner> runner_;
};
std::shared_ptr<const models::Model> ManagerTest::model_;
std::shared_ptr<ModelRunner> ManagerTest::runner_;

TEST_F(ManagerTest, CancelMidPrefillAndMidDecodeFreesEveryBlock) {
  ContinuousBatchingConfig c;
  c.allow_block_sharing = false;  // so "back to full" means no page in use at all
  // The long prompt needs ~80 steps of prefill, so it is still prefilling when the
  // test thread reacts to the short request's first token, even on a loaded machine.
  c.max_batch_tokens = 4;
  auto m = manager(c);
  ASSERT_TRUE(m->start().ok());
  RequestOptions lo, so;
  lo.request_id = "long";
  lo.max_new_tokens = 50;
  so.request_id = "short";
  so.max_new_tokens = 200;
  so.streaming = true;
  ASSERT_TRUE(m->add_request(prompt(2, 5), so).ok());
  ASSERT_TRUE(m->add_request(prompt(240, 6), lo).ok());
  std::optional<GenerationOutput> first = m->get_result("short", 60.0);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->status, RequestStatus::kDecoding);
  ASSERT_TRUE(m->cancel_request("long").ok());
  ASSERT_TRUE(m->cancel_request("short").ok());
  std::optional<GenerationOutput> l = m->get_result("long", 60.0);
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->status, RequestStatus::kFailed);
  EXPECT_TRUE(l->cancelled());
  EXPECT_EQ(l->error_code, ErrorCode::kCancelled);
  EXPECT_TRUE(l->generated_tokens.empty());  // cancelled during its prefill
  std::optional<GenerationOutput> s;
  do s = m->get_result("short", 60.0);
  while (s && !s->is_final());
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->cancelled());
  EXPECT_FALSE(s->generated_tokens.empty());  // cancelled while decoding
  EXPECT_LT(static_cast<int64_t>(s->generated_tokens.size()), 200);
  EXPECT_EQ(m->cancel_request("long").code(), ErrorCode::kNotFound);  // already ended
  ASSERT_TRUE(m->stop(true, 30.0, true).ok());
  const ManagerStats st = m->stats();
  EXPECT_EQ(st.pages_in_use, 0);
  EXPECT_EQ(st.cancelled, 2);
  EXPECT_LE(st.peak_pages_in_use, st.pages_capacity);
}

TEST_F(ManagerTest, SoftStopCompletesEverythingHardStopFailsWhatIsLeft) {
  {
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    for (int i = 0; i < 6; ++i) {
      RequestOptions o;
      o.max_new_tokens = 5;
      ASSERT_TRUE(m->add_request(prompt(3 + i, i), o).ok());
    }
    ASSERT_TRUE(m->stop(/*block=*/true, 60.0).ok());  // flush
    EXPECT_FALSE(m->is_running());
    for (int i = 0; i < 6; ++i) {
      std::optional<GenerationOutput> out = m->get_result();
      ASSERT_TRUE(out.has_value());
      EXPECT_EQ(out->status, RequestStatus::kFinished);
      EXPECT_EQ(out->generated_tokens.size(), 5u);
    }
    EXPECT_FALSE(m->get_result().has_value());  // stopped and empty: returns at once
  }
  {
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    PauseGuard paused = m->pause().value();  // nothing runs: every request is still pending at the stop
    for (int i = 0; i < 6; ++i) {
      RequestOptions o;
      o.max_new_tokens = 500;
      ASSERT_TRUE(m->add_request(prompt(3 + i, i), o).ok());
    }
    ASSERT_TRUE(m->stop(/*block=*/false, std::nullopt, false, /*hard_stop=*/true).ok());
    paused.release();
    ASSERT_TRUE(m->join(60.0).ok());
    int failed = 0;
    while (std::optional<GenerationOutput> out = m->get_result(std::nullopt, 0.0)) {
      EXPECT_EQ(out->status, RequestStatus::kFailed);
      EXPECT_EQ(out->error_code, ErrorCode::kCancelled);
      EXPECT_NE(out->error.find("hard_stop"), std::string::npos);
      ++failed;
    }
    EXPECT_EQ(failed, 6);
    // A stopped manager starts again (a fresh pool: keep_for_next_session was false).
    ASSERT_TRUE(m->start().ok());
    RequestOptions o;
    o.max_new_tokens = 3;
    const std::string id = m->add_request(prompt(4), o).value();
    std::optional<GenerationOutput> out = m->get_result(id, 60.0);
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(out->generated_tokens, alone(*runner_, prompt(4), 3));
  }
}

TEST_F(ManagerTest, PauseWithConcurrentProducersLosesNothing) {
  auto m = manager();
  ASSERT_TRUE(m->start().ok());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> expected;
  for (int i = 0; i < 5; ++i) {
    prompts.push_back(prompt(2 + 3 * i, 40 + i));
    expected.push_back(alone(*runner_, prompts.back(), 4));
  }
  std::optional<PauseGuard> outer(m->pause().value());
  std::atomic<int> added{0};
  std::vector<std::thread> producers;
  for (int t = 0; t < 4; ++t) {
    producers.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        if (i == 10 && t == 2) {
          PauseGuard inner = m->pause().value();  // a second holder: the loop stays parked until both leave
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        RequestOptions o;
        o.request_id = "p" + std::to_string(t) + "_" + std::to_string(i);
        o.max_new_tokens = 4;
        ASSERT_TRUE(m->add_request(prompts[static_cast<size_t>((t + i) % 5)], o).ok());
        ++added;
      }
    });
  }
  for (auto& th : producers) th.join();
  EXPECT_EQ(added.load(), 100);
  EXPECT_FALSE(m->get_result(std::nullopt, 0.2).has_value());  // paused: nothing ran
  EXPECT_EQ(m->stats().generated_tokens, 0);
  outer.reset();  // last holder leaves: the loop resumes
  int done = 0;
  while (done < 100) {
    std::optional<GenerationOutput> out = m->get_result(std::nullopt, 60.0);
    ASSERT_TRUE(out.has_value()) << done;
    ASSERT_EQ(out->status, RequestStatus::kFinished);
    const int t = out->request_id[1] - '0';
    const int i = std::stoi(out->request_id.substr(3));
    EXPECT_EQ(out->generated_tokens, expected[static_cast<size_t>((t + i) % 5)]) << out->request_id;
    ++done;
  }
  EXPECT_FALSE(m->get_result(std::nullopt, 0.05).has_value());  // no duplicates
}

TEST_F(ManagerTest, StreamingIteratorAndHandlersSeeEveryTokenOnce) {
  auto m = manager();
  ASSERT_TRUE(m->start().ok());
  const auto p = prompt(7, 3);
  const auto expected = alone(*runner_, p, 6);
  RequestOptions so;
  so.request_id = "s";
  so.max_new_tokens = 6;
  so.streaming = true;
  so.record_timestamps = true;
  ASSERT_TRUE(m->add_request(p, so).ok());
  ResultIterator it = m->request_id_iter("s");
  std::vector<GenerationOutput> seen;
  while (std::optional<GenerationOutput> o = it.next(60.0)) seen.push_back(*o);
  ASSERT_EQ(seen.size(), 6u);
  for (size_t k = 0; k < seen.size(); ++k) {
    EXPECT_EQ(seen[k].generated_tokens, std::vector<int32_t>(expected.begin(), expected.begin() + static_cast<long>(k) + 1));
    EXPECT_EQ(seen[k].status, k + 1 < seen.size() ? RequestStatus::kDecoding : RequestStatus::kFinished);
    EXPECT_EQ(seen[k].timestamps.size(), k + 1);
  }
  EXPECT_GE(seen.back().lifespan.second, seen.back().lifespan.first);
  EXPECT_GE(seen.back().lifespan.first, seen.back().created_time);
  EXPECT_TRUE(it.done());

  // A handler on a caller-chosen executor; and one registered after the request ended.
  std::mutex mu;
  std::vector<std::function<void()>> posted;
  Executor post = [&](std::function<void()> job) {
    std::lock_guard<std::mutex> lk(mu);
    posted.push_back(std::move(job));
  };
  std::vector<GenerationOutput> got;
  RequestOptions ho;
  ho.request_id = "h";
  ho.max_new_tokens = 3;
  ASSERT_TRUE(m->add_request(p, ho).ok());
  ASSERT_TRUE(m->register_result_handler("h", [&](const GenerationOutput& o) { got.push_back(o); }, post).ok());
  RequestOptions lo;
  lo.request_id = "late";
  lo.max_new_tokens = 2;
  ASSERT_TRUE(m->add_request(p, lo).ok());
  ASSERT_TRUE(m->stop(true, 60.0, true).ok());
  std::vector<GenerationOutput> late;
  ASSERT_TRUE(m->register_result_handler("late", [&](const GenerationOutput& o) { late.push_back(o); }).ok());
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].generated_tokens, std::vector<int32_t>(expected.begin(), expected.begin() + 2));
  EXPECT_TRUE(got.empty());  // not run yet: they wait on our executor
  for (auto& job : posted) job();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, RequestStatus::kFinished);
  EXPECT_EQ(got[0].generated_tokens, std::vector<int32_t>(expected.begin(), expected.begin() + 3));
  EXPECT_FALSE(m->get_result(std::nullopt, 0.0).has_value());  // handled outputs bypass the queue
  EXPECT_EQ(m->register_result_handler("nobody", [](const GenerationOutput&) {}).code(), ErrorCode::kNotFound);
}

TEST_F(ManagerTest, QueueBackpressure) {
  ContinuousBatchingConfig c;
  c.max_queue_size = 2;
  auto m = manager(c);
  RequestOptions o;
  o.max_new_tokens = 2;
  ASSERT_TRUE(m->add_request(prompt(3), o).ok());
  ASSERT_TRUE(m->add_request(prompt(3), o).ok());
  Result<std::string> full = m->add_request(prompt(3), o);
  EXPECT_EQ(full.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("max_queue_size"), std::string::npos);
  o.queue_timeout = 0.05;
  EXPECT_EQ(m->add_request(prompt(3), o).status().code(), ErrorCode::kTimeout);
  // Once the loop admits the queued requests, there is room again.
  ASSERT_TRUE(m->start().ok());
  o.queue_timeout = 60.0;
  EXPECT_TRUE(m->add_request(prompt(3), o).ok());
  ASSERT_TRUE(m->stop(true, 60.0).ok());
  EXPECT_EQ(m->stats().finished, 3);
}

TEST_F(ManagerTest, BadRequestsFailAlone) {
  ContinuousBatchingConfig c;
  c.num_blocks = 4;  // 64 positions at most per request
  c.per_request_processors = true;
  auto m = manager(c);
  EXPECT_EQ(m->add_request({}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(m->add_request({1, 5000}).status().code(), ErrorCode::kOutOfRange);
  RequestOptions bad;
  bad.temperature = -1.0f;
  EXPECT_EQ(m->add_request({1, 2}, bad).status().code(), ErrorCode::kInvalidArgument);
  RequestOptions stops;
  stops.stop_strings = {"x"};
  EXPECT_NE(m->add_request({1, 2}, stops).status().message().find("tokenizer"), std::string::npos);
  RequestOptions dup;
  dup.request_id = "same";
  ASSERT_TRUE(m->add_request({4, 5}, dup).ok());
  EXPECT_EQ(m->add_request({4, 5}, dup).status().code(), ErrorCode::kInvalidArgument);
  // Too long for the whole pool: it fails, its neighbours finish.
  RequestOptions big;
  big.request_id = "big";
  big.max_new_tokens = 100;
  ASSERT_TRUE(m->add_request(prompt(40), big).ok());
  RequestOptions ok;
  ok.request_id = "ok";
  ok.max_new_tokens = 4;
  ASSERT_TRUE(m->add_request(prompt(10), ok).ok());
  ASSERT_TRUE(m->start().ok());
  ASSERT_TRUE(m->stop(true, 60.0).ok());
  std::optional<GenerationOutput> b = m->get_result("big", 0.0);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->status, RequestStatus::kFailed);
  EXPECT_EQ(b->error_code, ErrorCode::kResourceExhausted);
  std::optional<GenerationOutput> k = m->get_result("ok", 0.0);
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->status, RequestStatus::kFinished);
  EXPECT_EQ(k->generated_tokens, alone(*runner_, prompt(10), 4));
  EXPECT_FALSE(m->fatal_error().has_value());
}

// A minimal detokenizer: token id → its last digit.
class DigitText : public TextStream {
 public:
  Result<std::string> push(int32_t id) override { return std::to_string(id % 10); }
  Result<std::string> flush() override { return std::string(); }
};

TEST_F(ManagerTest, PerRequestSamplingSeedsAndStopStrings) {
  ContinuousBatchingConfig c;
  c.per_request_processors = true;
  c.return_logprobs = true;
  ManagerOptions mo;
  mo.text_stream = [](const std::vector<int32_t>&) { return std::make_unique<DigitText>(); };
  auto m = manager(c, mo);
  ASSERT_TRUE(m->start().ok());
  const auto p = prompt(9, 77);
  // The reference: the same request alone, same sampling settings and seed.
  GenerateOptions g;
  g.max_new_tokens = 12;
  g.sampling.do_sample = true;
  g.sampling.temperature = 1.5f;
  g.sampling.top_k = 40;
  g.sampling.top_p = 0.9f;
  g.seed = 2024;
  DigitText text;
  const GenerateResult ref = generate(*runner_, p, g, &text).value();
  {  // Without logprobs: the same tokens, none of the vocabulary passes.
    GenerateOptions quiet = g;
    quiet.logprobs = false;
    DigitText t;
    const GenerateResult r = generate(*runner_, p, quiet, &t).value();
    EXPECT_EQ(r.generated_ids, ref.generated_ids);
    EXPECT_TRUE(r.logprobs.empty());
  }
  // Stop at the digit the reference shows third: generation must end right there.
  g.stop_strings = {ref.text.substr(2, 1)};
  DigitText text2;
  const GenerateResult ref_stop = generate(*runner_, p, g, &text2).value();
  ASSERT_EQ(ref_stop.finish_reason, generation::FinishReason::kStopString);

  for (int i = 0; i < 6; ++i) {  // batch mates with other settings
    RequestOptions o;
    o.max_new_tokens = 10;
    o.do_sample = true;
    o.temperature = 0.7f;
    o.seed = static_cast<uint64_t>(i);
    ASSERT_TRUE(m->add_request(prompt(3 + i, 90 + i), o).ok());
  }
  RequestOptions o;
  o.max_new_tokens = 12;
  o.do_sample = true;
  o.temperature = 1.5f;
  o.top_k = 40;
  o.top_p = 0.9f;
  o.seed = 2024;
  o.request_id = "sampled";
  ASSERT_TRUE(m->add_request(p, o).ok());
  o.request_id = "stopped";
  o.stop_strings = g.stop_strings;
  ASSERT_TRUE(m->add_request(p, o).ok());
  std::optional<GenerationOutput> a = m->get_result("sampled", 60.0);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->generated_tokens, ref.generated_ids);
  EXPECT_EQ(a->text, ref.text);
  ASSERT_EQ(a->logprobs.size(), ref.logprobs.size());
  for (size_t i = 0; i < ref.logprobs.size(); ++i) EXPECT_EQ(a->logprobs[i], ref.logprobs[i]);
  std::optional<GenerationOutput> s = m->get_result("stopped", 60.0);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->finish_reason, generation::FinishReason::kStopString);
  EXPECT_EQ(s->generated_tokens, ref_stop.generated_ids);
  EXPECT_EQ(s->text, ref_stop.text);
}

// Two holders of pause(), released in either order: the loop stays parked until
// the last one leaves, then runs what was queued meanwhile.
TEST_F(ManagerTest, NestedPausesReleaseInEitherOrder) {
  const std::vector<int32_t> p = prompt(6, 77);
  const std::vector<int32_t> want = alone(*runner_, p, 3);
  for (const bool first_taken_first_released : {true, false}) {
    SCOPED_TRACE(first_taken_first_released ? "first taken, first released" : "first taken, last released");
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    std::optional<PauseGuard> first(m->pause().value());
    std::optional<PauseGuard> second(m->pause().value());
    RequestOptions o;
    o.max_new_tokens = 3;
    const std::string id = m->add_request(p, o).value();
    if (first_taken_first_released) first.reset();
    else second.reset();
    EXPECT_FALSE(m->get_result(id, 0.2).has_value()) << "ran with one pause still held";
    EXPECT_EQ(m->stats().steps, 0);
    if (first_taken_first_released) second.reset();
    else first.reset();
    std::optional<GenerationOutput> out = m->get_result(id, 60.0);
    ASSERT_TRUE(out.has_value()) << "did not resume after the last pause was released";
    EXPECT_EQ(out->status, RequestStatus::kFinished);
    EXPECT_EQ(out->generated_tokens, want);
    ASSERT_TRUE(m->stop(true, 30.0).ok());
  }
}

TEST_F(ManagerTest, WarmupDestroyAndAfterlife) {
  auto m = manager();
  // Warmup runs the model on its own: one dummy prefill (min(max_batch_tokens, 32) rows)
  // and one decode row, outside the manager's pages and statistics.
  runtime::OpProfile& profile = runtime::OpProfile::global();
  profile.reset();
  profile.set_enabled(true);
  const Status warm = m->warmup();
  profile.set_enabled(false);
  EXPECT_TRUE(warm.ok()) << warm.to_string();
  std::set<std::string> linear_rows;
  for (const runtime::OpProfile::Entry& e : profile.entries())
    if (e.op == "linear") linear_rows.insert(e.rows);
  profile.reset();
  const std::string prefill_rows =
      runtime::OpProfile::rows_class(std::min<int64_t>(m->resources().max_batch_tokens, 32));
  EXPECT_TRUE(linear_rows.count(prefill_rows)) << "no prefill of " << prefill_rows << " rows";
  EXPECT_TRUE(linear_rows.count("1")) << "no decode step";
  const ManagerStats before = m->stats();
  EXPECT_EQ(before.steps, 0);
  EXPECT_EQ(before.computed_tokens, 0);
  EXPECT_EQ(before.pages_in_use, 0);

  ASSERT_TRUE(m->start().ok());
  EXPECT_TRUE(m->is_running());
  EXPECT_TRUE(m->warmup().ok());  // pauses the running loop meanwhile
  RequestOptions o;
  o.max_new_tokens = 1000;
  ASSERT_TRUE(m->add_request(prompt(5), o).ok());
  m->destroy();
  m->destroy();  // idempotent
  EXPECT_FALSE(m->is_running());
  std::optional<GenerationOutput> out = m->get_result(std::nullopt, 0.0);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->status, RequestStatus::kFailed);
  EXPECT_LT(out->generated_tokens.size(), 1000u);
  // After destroy every call that would need the loop fails, naming the call and why.
  const Status added = m->add_request({1}).status();
  EXPECT_EQ(added.code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(added.message(), "add_request: the manager was destroyed");
  const Status started = m->start();
  EXPECT_EQ(started.code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(started.message(), "start: the manager was destroyed");
}

// ── Lifecycle calls from every place: none may hang ──
// Each scenario runs under a watchdog: a call that hangs ends the test process
// with a message (ctest reports the failure) instead of blocking the suite.
void within(double seconds, const char* what, std::function<void()> body) {
  std::packaged_task<void()> task(std::move(body));
  std::future<void> done = task.get_future();
  std::thread t(std::move(task));
  if (done.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "HANG: %s did not end within %.0f s\n", what, seconds);
    std::fflush(stderr);
    std::_Exit(3);
  }
  t.join();
  done.get();
}

constexpr double kNoHang = 60.0;

RequestOptions long_request(const std::string& id, bool streaming = false) {
  RequestOptions o;
  o.request_id = id;
  o.max_new_tokens = 40;
  o.streaming = streaming;
  return o;
}

TEST_F(ManagerTest, MainThreadInsidePauseGetsErrorsNotHangs) {
  within(kNoHang, "soft stop inside pause", [&] {
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    ASSERT_TRUE(m->add_request(prompt(4), long_request("a")).ok());
    PauseGuard paused = m->pause().value();
    const Status stop = m->stop(/*block=*/true);
    EXPECT_EQ(stop.code(), ErrorCode::kFailedPrecondition) << stop.to_string();
    EXPECT_NE(stop.message().find("holds pause()"), std::string::npos) << stop.message();
    EXPECT_EQ(m->stop(true, 5.0).code(), ErrorCode::kFailedPrecondition);  // a timeout does not make it wait
    EXPECT_TRUE(m->is_running());  // the refused stop changed nothing
    const Status join = m->join();
    EXPECT_EQ(join.code(), ErrorCode::kFailedPrecondition) << join.to_string();
    EXPECT_EQ(m->join(0.05).code(), ErrorCode::kTimeout);  // with a timeout it only waits that long
    // A non-blocking soft stop is taken: the loop finishes once the pause ends.
    EXPECT_TRUE(m->stop(/*block=*/false).ok());
    const Status restart = m->start();  // would wait for the stopping loop, which is paused
    EXPECT_EQ(restart.code(), ErrorCode::kFailedPrecondition) << restart.to_string();
    paused.release();
    ASSERT_TRUE(m->join(kNoHang).ok());
    std::optional<GenerationOutput> out = m->get_result("a", 0.0);
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(out->status, RequestStatus::kFinished);
    EXPECT_EQ(out->generated_tokens, alone(*runner_, prompt(4), 40));
  });
  within(kNoHang, "hard stop inside pause", [&] {
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    PauseGuard paused = m->pause().value();
    ASSERT_TRUE(m->add_request(prompt(4), long_request("a")).ok());  // paused: it cannot finish first
    EXPECT_TRUE(m->stop(/*block=*/true, std::nullopt, false, /*hard_stop=*/true).ok());
    EXPECT_FALSE(m->is_running());
    EXPECT_TRUE(m->join().ok());  // ended: join returns at once, pause or not
    paused.release();
    std::optional<GenerationOutput> out = m->get_result("a", 0.0);
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(out->status, RequestStatus::kFailed);
  });
  within(kNoHang, "destroy inside pause", [&] {
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    ASSERT_TRUE(m->add_request(prompt(4), long_request("a")).ok());
    PauseGuard paused = m->pause().value();
    m->destroy();
    EXPECT_FALSE(m->is_running());
    paused.release();  // after destroy: harmless
    EXPECT_EQ(m->pause().status().code(), ErrorCode::kFailedPrecondition);
    EXPECT_TRUE(m->join().ok());
  });
  within(kNoHang, "pause before start", [&] {
    auto m = manager();
    PauseGuard paused = m->pause().value();  // nothing to park yet
    ASSERT_TRUE(m->start().ok());            // starts parked
    ASSERT_TRUE(m->add_request(prompt(4), long_request("a")).ok());
    EXPECT_FALSE(m->get_result("a", 0.1).has_value());
    EXPECT_EQ(m->stop(true).code(), ErrorCode::kFailedPrecondition);
    paused.release();
    ASSERT_TRUE(m->stop(true, kNoHang).ok());
    EXPECT_EQ(m->get_result("a", 0.0)->status, RequestStatus::kFinished);
  });
}

// Result handlers run on the batching thread (or, for outputs already queued, inside
// register_result_handler while the loop waits): the loop cannot wait for itself.
TEST_F(ManagerTest, ResultHandlerLifecycleCallsEndOrFail) {
  struct Seen {
    std::mutex mu;
    std::vector<Status> statuses;
    bool called = false;
  };
  // Registers `act` as the handler of a streaming request and returns what it saw.
  auto run = [&](ContinuousBatchingManager& m, std::function<Status()> act) {
    auto seen = std::make_shared<Seen>();
    EXPECT_TRUE(m.add_request(prompt(4), long_request("h", true)).ok());
    EXPECT_TRUE(m.register_result_handler("h", [seen, act](const GenerationOutput&) {
                   std::lock_guard<std::mutex> lk(seen->mu);
                   if (seen->called) return;
                   seen->called = true;
                   seen->statuses.push_back(act());
                 }).ok());
    return seen;
  };
  within(kNoHang, "pause from a handler", [&] {
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    auto seen = run(*m, [&] { return m->pause().status(); });
    ASSERT_TRUE(m->stop(true, kNoHang).ok());
    ASSERT_EQ(seen->statuses.size(), 1u);
    EXPECT_EQ(seen->statuses[0].code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(seen->statuses[0].message().find("result handler"), std::string::npos) << seen->statuses[0].message();
  });
  within(kNoHang, "join and blocking stops from a handler", [&] {
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    auto seen = run(*m, [&] {
      const Status a = m->join();
      const Status b = m->join(0.1);
      const Status c = m->stop(/*block=*/true);
      const Status d = m->stop(/*block=*/true, std::nullopt, false, /*hard_stop=*/true);
      for (const Status* s : {&a, &b, &c, &d})
        if (s->code() != ErrorCode::kFailedPrecondition) return *s;
      return a;
    });
    ASSERT_TRUE(m->stop(true, kNoHang).ok());
    ASSERT_EQ(seen->statuses.size(), 1u);
    EXPECT_EQ(seen->statuses[0].code(), ErrorCode::kFailedPrecondition) << seen->statuses[0].to_string();
    EXPECT_FALSE(m->get_result("h", 0.0).has_value());  // handled outputs bypass the queue
  });
  within(kNoHang, "non-blocking stop from a handler", [&] {
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    auto seen = run(*m, [&] { return m->stop(/*block=*/false); });
    ASSERT_TRUE(m->join(kNoHang).ok());  // the loop ends by itself: the soft stop finished "h"
    ASSERT_EQ(seen->statuses.size(), 1u);
    EXPECT_TRUE(seen->statuses[0].ok()) << seen->statuses[0].to_string();
    EXPECT_EQ(m->stats().finished, 1);
  });
  within(kNoHang, "destroy from a handler", [&] {
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    auto seen = run(*m, [&] {
      m->destroy();
      return Status::Ok();
    });
    ASSERT_TRUE(m->join(kNoHang).ok());  // the loop ended like a hard stop
    EXPECT_EQ(m->stats().finished, 0);
    EXPECT_EQ(m->add_request({1}).status().code(), ErrorCode::kFailedPrecondition);
    m->destroy();  // the teardown the handler could not do
    EXPECT_FALSE(m->is_running());
  });
  within(kNoHang, "a handler given queued outputs by register_result_handler", [&] {
    // Outputs queued before the handler exists are delivered on this thread while
    // the loop waits to deliver the next ones: waiting for the loop here would never end.
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    ASSERT_TRUE(m->add_request(prompt(4), long_request("q", true)).ok());
    while (m->stats().generated_tokens < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::vector<Status> seen;
    ASSERT_TRUE(m->register_result_handler("q", [&](const GenerationOutput&) {
                   if (seen.empty()) {
                     seen.push_back(m->pause().status());
                     seen.push_back(m->stop(/*block=*/true));
                     seen.push_back(m->join());
                   }
                 }).ok());
    ASSERT_EQ(seen.size(), 3u);
    for (const Status& st : seen) EXPECT_EQ(st.code(), ErrorCode::kFailedPrecondition) << st.to_string();
    ASSERT_TRUE(m->stop(true, kNoHang).ok());
  });
  within(kNoHang, "destructor after a handler's destroy", [&] {
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    auto seen = run(*m, [&] {
      m->destroy();
      return Status::Ok();
    });
    ASSERT_TRUE(m->join(kNoHang).ok());
    m.reset();  // tears down what the handler's destroy left
  });
}

TEST_F(ManagerTest, OtherThreadsMayWaitOnEachOther) {
  within(kNoHang, "stop while another thread holds pause", [&] {
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    ASSERT_TRUE(m->add_request(prompt(4), long_request("a")).ok());
    std::promise<void> holding;
    std::thread holder([&] {
      PauseGuard g = m->pause().value();
      holding.set_value();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    });
    holding.get_future().wait();
    EXPECT_TRUE(m->stop(/*block=*/true).ok());  // waits for the holder, then the soft stop's work
    holder.join();
    EXPECT_EQ(m->get_result("a", 0.0)->status, RequestStatus::kFinished);
  });
  within(kNoHang, "another thread stops while this one holds pause", [&] {
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    ASSERT_TRUE(m->add_request(prompt(4), long_request("a")).ok());
    std::optional<PauseGuard> paused(m->pause().value());
    std::future<Status> stopped = std::async(std::launch::async, [&] { return m->stop(true); });
    EXPECT_EQ(stopped.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);  // waits for us
    paused.reset();
    EXPECT_TRUE(stopped.get().ok());
    EXPECT_FALSE(m->is_running());
  });
  within(kNoHang, "join from another thread, destroy from a third", [&] {
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    ASSERT_TRUE(m->add_request(prompt(4), long_request("a")).ok());
    std::future<Status> joined = std::async(std::launch::async, [&] { return m->join(); });
    std::future<std::optional<GenerationOutput>> waiting =
        std::async(std::launch::async, [&] { return m->get_result("never", std::nullopt); });
    std::thread destroyer([&] { m->destroy(); });
    destroyer.join();
    EXPECT_TRUE(joined.get().ok());
    EXPECT_FALSE(waiting.get().has_value());  // the closed queue wakes a waiting reader
  });
  within(kNoHang, "two threads destroy at once, one holding pause", [&] {
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    std::promise<void> holding, added;
    std::thread a([&] {
      PauseGuard g = m->pause().value();
      holding.set_value();
      added.get_future().wait();
      m->destroy();
    });
    holding.get_future().wait();
    ASSERT_TRUE(m->add_request(prompt(4), long_request("a")).ok());  // paused: it cannot finish first
    added.set_value();
    std::thread b([&] { m->destroy(); });
    a.join();
    b.join();
    EXPECT_FALSE(m->is_running());
    EXPECT_EQ(m->get_result("a", 0.0)->status, RequestStatus::kFailed);
  });
  within(kNoHang, "pause from another thread while a soft stop drains", [&] {
    auto m = manager();
    ASSERT_TRUE(m->start().ok());
    ASSERT_TRUE(m->add_request(prompt(4), long_request("a")).ok());
    ASSERT_TRUE(m->stop(/*block=*/false).ok());
    std::thread pauser([&] {
      Result<PauseGuard> g = m->pause();  // parks the draining loop, or finds it ended
      EXPECT_TRUE(g.ok());
    });
    pauser.join();
    EXPECT_TRUE(m->join(kNoHang).ok());
    EXPECT_EQ(m->get_result("a", 0.0)->status, RequestStatus::kFinished);
  });
}

}  // namespace
}  // namespace loom::batching
