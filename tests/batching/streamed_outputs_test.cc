// Streamed outputs are built from each request's StreamedOutput (a step appends only
// what it added): whichever way they leave — the queue, an inline handler, a handler
// on an executor, or the queue and then a handler registered mid-stream — the k-th
// output holds exactly the first k tokens, logprobs, alternatives and timestamps, and
// a prefix of the final text, as a full copy of the request would.
#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "batching_test_util.h"

namespace loom::batching {
namespace streamed_outputs {

using testing::load_fixture;
using testing::make_runner;
using testing::random_tokens;

// Two letters a token, so the text grows with every step.
class LetterStream : public TextStream {
 public:
  Result<std::string> push(int32_t id) override {
    return std::string{static_cast<char>('a' + id % 26), static_cast<char>('A' + id / 26 % 26)};
  }
  Result<std::string> flush() override { return std::string(); }
};

class StreamedOutputsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = load_fixture("llama-f32");
    runner_ = make_runner(model_);
  }
  static void TearDownTestSuite() {
    runner_.reset();
    model_.reset();
  }
  std::unique_ptr<ContinuousBatchingManager> manager() {
    ContinuousBatchingConfig c;
    c.num_blocks = 64;
    c.page_size = 16;
    ManagerOptions o;
    o.text_stream = [](const std::vector<int32_t>&) { return std::make_unique<LetterStream>(); };
    return ContinuousBatchingManager::create(runner_, testing::no_eos_config(), c, std::move(o)).value();
  }
  RequestOptions options(const std::string& id) {
    RequestOptions o;
    o.request_id = id;
    o.max_new_tokens = kTokens;
    o.streaming = true;
    o.logprobs = true;
    o.top_logprobs = 2;
    o.record_timestamps = true;
    return o;
  }
  std::vector<int32_t> prompt(uint32_t seed) {
    std::mt19937 rng(seed);
    return random_tokens(rng, 9, model_->vocab_size());
  }
  // Every output, in order, is the final one cut after its k-th token.
  static void expect_prefixes(const std::vector<GenerationOutput>& outs, const std::vector<int32_t>& prompt) {
    ASSERT_EQ(outs.size(), static_cast<size_t>(kTokens));
    const GenerationOutput& last = outs.back();
    ASSERT_TRUE(last.is_final());
    EXPECT_EQ(last.status, RequestStatus::kFinished);
    EXPECT_EQ(last.text.size(), 2u * kTokens);
    for (size_t k = 1; k <= outs.size(); ++k) {
      const GenerationOutput& o = outs[k - 1];
      EXPECT_EQ(o.request_id, last.request_id);
      EXPECT_EQ(o.prompt_ids, prompt);
      ASSERT_EQ(o.generated_tokens.size(), k);
      ASSERT_EQ(o.logprobs.size(), k);
      ASSERT_EQ(o.top_logprobs.size(), k);
      ASSERT_EQ(o.timestamps.size(), k);
      EXPECT_TRUE(std::equal(o.generated_tokens.begin(), o.generated_tokens.end(), last.generated_tokens.begin()));
      EXPECT_TRUE(std::equal(o.logprobs.begin(), o.logprobs.end(), last.logprobs.begin()));
      EXPECT_EQ(o.top_logprobs.back().front().id, last.top_logprobs[k - 1].front().id);
      EXPECT_EQ(o.timestamps.back(), last.timestamps[k - 1]);
      EXPECT_EQ(o.text, last.text.substr(0, 2 * k)) << "output " << k;
      if (k < outs.size()) {
        EXPECT_EQ(o.status, RequestStatus::kDecoding);
        EXPECT_FALSE(o.is_final());
      }
    }
  }
  static constexpr int64_t kTokens = 12;
  static std::shared_ptr<const models::Model> model_;
  static std::shared_ptr<ModelRunner> runner_;
};
std::shared_ptr<const models::Model> StreamedOutputsTest::model_;
std::shared_ptr<ModelRunner> StreamedOutputsTest::runner_;

TEST_F(StreamedOutputsTest, FromTheQueueInlineHandlersAndExecutorsAlike) {
  auto m = manager();
  // Inline: the handler sees the stream during the call and keeps a copy.
  std::vector<GenerationOutput> inline_outs;
  ASSERT_TRUE(m->add_request(prompt(1), options("inline")).ok());
  ASSERT_TRUE(m->register_result_handler("inline", [&](const GenerationOutput& o) { inline_outs.push_back(o); }).ok());
  // On an executor: jobs run later, on another thread, after the stream has moved on.
  std::mutex jobs_mu;
  std::vector<std::function<void()>> jobs;
  std::vector<GenerationOutput> executor_outs;
  ASSERT_TRUE(m->add_request(prompt(2), options("executor")).ok());
  ASSERT_TRUE(m->register_result_handler(
                   "executor", [&](const GenerationOutput& o) { executor_outs.push_back(o); },
                   [&](std::function<void()> job) {
                     std::lock_guard<std::mutex> lk(jobs_mu);
                     jobs.push_back(std::move(job));
                   })
                  .ok());
  ASSERT_TRUE(m->add_request(prompt(3), options("queued")).ok());
  ASSERT_TRUE(m->start().ok());
  std::vector<GenerationOutput> queued_outs;
  for (auto it = m->request_id_iter("queued"); !it.done();) {
    std::optional<GenerationOutput> o = it.next(60.0);
    ASSERT_TRUE(o.has_value());
    queued_outs.push_back(std::move(*o));
  }
  ASSERT_TRUE(m->stop(true, 60.0).ok());
  std::thread runner([&] {
    for (auto& job : jobs) job();
  });
  runner.join();
  expect_prefixes(inline_outs, prompt(1));
  expect_prefixes(executor_outs, prompt(2));
  expect_prefixes(queued_outs, prompt(3));
  // Greedy, batched: the same tokens as each run alone.
  EXPECT_EQ(queued_outs.back().generated_tokens, testing::alone(*runner_, prompt(3), kTokens));
}

TEST_F(StreamedOutputsTest, AHandlerRegisteredMidStreamContinuesFromTheQueue) {
  auto m = manager();
  ASSERT_TRUE(m->add_request(prompt(4), options("switch")).ok());
  ASSERT_TRUE(m->start().ok());
  std::vector<GenerationOutput> outs;
  for (int k = 0; k < 2; ++k) {
    std::optional<GenerationOutput> o = m->get_result("switch", 60.0);
    ASSERT_TRUE(o.has_value());
    outs.push_back(std::move(*o));
  }
  std::mutex mu;
  std::vector<GenerationOutput> handled;
  // Outputs queued meanwhile (or all of them, if the request has ended) reach the handler first.
  ASSERT_TRUE(m->register_result_handler("switch", [&](const GenerationOutput& o) {
                 std::lock_guard<std::mutex> lk(mu);
                 handled.push_back(o);
               }).ok());
  ASSERT_TRUE(m->stop(true, 60.0).ok());
  std::lock_guard<std::mutex> lk(mu);
  outs.insert(outs.end(), handled.begin(), handled.end());
  expect_prefixes(outs, prompt(4));
}

}  // namespace streamed_outputs
}  // namespace loom::batching
