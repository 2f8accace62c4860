// num_return_sequences: the prompt is computed once, then sequence k forks from
// it (full KV pages shared, the partial last page copied) and samples with its
// own RNG stream. Each sequence must equal an independent run of the same
// prompt with that stream's seed, whatever the batching.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <thread>
#include <mutex>
#include <chrono>

#include "batching_test_util.h"
#include "loom/batching/generate_batch.h"

namespace loom::batching {
namespace {

using testing::load_fixture;
using testing::make_runner;
using testing::random_tokens;

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

generation::SamplingParams sampling() {
  generation::SamplingParams p;
  p.do_sample = true;
  p.temperature = 1.3f;  // flat enough that different streams diverge quickly
  p.top_k = 50;
  return p;
}

GenerationConfig sampling_config() {
  GenerationConfig gc = testing::no_eos_config();
  gc.do_sample = true;
  gc.temperature = 1.3;
  gc.top_k = 50;
  return gc;
}

std::vector<int32_t> alone_sampled(ModelRunner& runner, const std::vector<int32_t>& prompt, int64_t max_new,
                                   uint64_t seed) {
  GenerateOptions o;
  o.max_new_tokens = max_new;
  o.sampling = sampling();
  o.seed = seed;
  return generate(runner, prompt, o).value().generated_ids;
}

TEST(ReturnSequences, EachSequenceEqualsAnIndependentRunWithItsSeed) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  std::mt19937 rng(11);
  const std::vector<int32_t> prompt = random_tokens(rng, 200, model->vocab_size());  // 12 full pages + 8
  const int64_t max_new = 6;
  const uint64_t seed = 42;
  for (bool sharing : {true, false}) {
    SCOPED_TRACE(sharing ? "block sharing on" : "block sharing off");
    ContinuousBatchingConfig cfg;
    cfg.page_size = 16;
    cfg.num_blocks = 200;
    cfg.allow_block_sharing = sharing;
    auto m = ContinuousBatchingManager::create(runner, sampling_config(), cfg).value();
    RequestOptions o;
    o.request_id = "r";
    o.max_new_tokens = max_new;
    o.seed = seed;
    o.num_return_sequences = 4;
    ASSERT_EQ(m->add_request(prompt, o).value(), "r");
    ASSERT_TRUE(m->start().ok());
    std::map<std::string, GenerationOutput> got;
    while (got.size() < 4) {
      std::optional<GenerationOutput> out = m->get_result(std::nullopt, 60.0);
      ASSERT_TRUE(out.has_value()) << "timed out after " << got.size() << " outputs";
      ASSERT_TRUE(out->is_final());
      got[out->request_id] = *out;
    }
    std::set<std::vector<int32_t>> distinct;
    for (int k = 0; k < 4; ++k) {
      const std::string id = k == 0 ? "r" : "r#" + std::to_string(k);
      ASSERT_TRUE(got.count(id)) << id;
      const GenerationOutput& out = got[id];
      EXPECT_EQ(out.status, RequestStatus::kFinished) << out.error;
      EXPECT_EQ(out.sequence_index, k);
      EXPECT_EQ(out.parent_request_id, k == 0 ? "" : "r");
      EXPECT_EQ(out.prompt_ids, prompt);
      EXPECT_EQ(out.generated_tokens, alone_sampled(*runner, prompt, max_new, seed + kGolden * static_cast<uint64_t>(k)))
          << id;
      distinct.insert(out.generated_tokens);
    }
    EXPECT_GT(distinct.size(), 1u) << "every sequence sampled the same tokens";
    ASSERT_TRUE(m->stop(true, 30.0, /*keep_for_next_session=*/true).ok());
    const ManagerStats s = m->stats();
    // The prompt was fed once; each sequence then feeds its tokens but the last.
    EXPECT_EQ(s.computed_tokens, 200 + 4 * (max_new - 1));
    EXPECT_EQ(s.generated_tokens, 4 * max_new);
    // Four private copies of the prompt would need 4 × 13 blocks × 2 layers.
    EXPECT_LT(s.peak_pages_in_use, 2 * 13 * model->num_layers());
    EXPECT_EQ(s.pages_in_use, s.cached_pages);
  }
}

TEST(ReturnSequences, BatchedWithOthersUnderATinyPoolStillEqualIndependentRuns) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(random_tokens(rng, 20 + 23 * i, model->vocab_size()));
  const int64_t max_new = 24;
  for (double swap_gib : {0.0, 1.0 / 64}) {
    SCOPED_TRACE(swap_gib > 0 ? "swap" : "recompute");
    ContinuousBatchingConfig cfg;
    cfg.page_size = 8;
    cfg.num_blocks = 24;  // 192 positions: forks and preemptions compete for pages
    cfg.max_batch_tokens = 32;
    cfg.cpu_offload_space = swap_gib;
    cfg.safety_margin = 0.0;  // admit what fits, so that growing sequences must preempt
    auto m = ContinuousBatchingManager::create(runner, sampling_config(), cfg).value();
    ASSERT_TRUE(m->start().ok());
    for (int i = 0; i < 6; ++i) {
      RequestOptions o;
      o.request_id = "p" + std::to_string(i);
      o.max_new_tokens = max_new;
      o.seed = 100 + static_cast<uint64_t>(i);
      o.num_return_sequences = 1 + i % 3;
      ASSERT_TRUE(m->add_request(prompts[static_cast<size_t>(i)], o).ok());
    }
    int outputs = 0;
    for (int i = 0; i < 6; ++i) outputs += 1 + i % 3;
    std::vector<GenerationOutput> got;
    for (int n = 0; n < outputs; ++n) {
      std::optional<GenerationOutput> out = m->get_result(std::nullopt, 120.0);
      ASSERT_TRUE(out.has_value()) << "timed out after " << n << " outputs";
      got.push_back(*out);
    }
    ASSERT_TRUE(m->stop(true, 30.0, true).ok());  // the runner is free for the independent runs
    for (const GenerationOutput& out : got) {
      ASSERT_EQ(out.status, RequestStatus::kFinished) << out.request_id << ": " << out.error;
      const std::string parent = out.parent_request_id.empty() ? out.request_id : out.parent_request_id;
      const int i = std::stoi(parent.substr(1));
      const uint64_t seed = 100 + static_cast<uint64_t>(i) + kGolden * static_cast<uint64_t>(out.sequence_index);
      EXPECT_EQ(out.generated_tokens, alone_sampled(*runner, prompts[static_cast<size_t>(i)], max_new, seed))
          << out.request_id;
    }
    const ManagerStats s = m->stats();
    EXPECT_EQ(s.finished, outputs);
    EXPECT_GT(s.preempted_recompute + s.preempted_swap, 0) << "the pool was meant to be too small";
    if (swap_gib > 0) EXPECT_GT(s.preempted_swap, 0);
    EXPECT_EQ(s.pages_in_use, s.cached_pages);
    EXPECT_EQ(s.swap_pages_in_use, 0);
  }
}

TEST(ReturnSequences, WithNoRoomToForkASequenceComputesThePromptItself) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  std::mt19937 rng(8);
  const std::vector<int32_t> prompt = random_tokens(rng, 20, model->vocab_size());  // 2 full pages of 8 + 4
  ContinuousBatchingConfig cfg;
  cfg.page_size = 8;
  cfg.num_blocks = 3;  // exactly prompt + 4 new tokens: no block left to copy the partial page into
  cfg.allow_block_sharing = false;
  auto m = ContinuousBatchingManager::create(runner, sampling_config(), cfg).value();
  RequestOptions o;
  o.request_id = "f";
  o.max_new_tokens = 4;
  o.seed = 3;
  o.num_return_sequences = 2;
  ASSERT_TRUE(m->add_request(prompt, o).ok());
  ASSERT_TRUE(m->start().ok());
  std::vector<GenerationOutput> got;
  for (int n = 0; n < 2; ++n) got.push_back(m->get_result(std::nullopt, 60.0).value());
  ASSERT_TRUE(m->stop(true, 30.0).ok());
  for (const GenerationOutput& out : got) {
    ASSERT_EQ(out.status, RequestStatus::kFinished) << out.request_id << ": " << out.error;
    EXPECT_EQ(out.generated_tokens, alone_sampled(*runner, prompt, 4, 3 + kGolden * static_cast<uint64_t>(out.sequence_index)));
  }
  EXPECT_EQ(m->stats().computed_tokens, 2 * (20 + 3));  // the prompt was computed twice
}

TEST(ReturnSequences, InvalidCountsAreRejected) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  auto greedy = ContinuousBatchingManager::create(runner, testing::no_eos_config(), {}).value();
  RequestOptions o;
  o.num_return_sequences = 3;
  Result<std::string> r = greedy->add_request({5, 6, 7}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("num_return_sequences"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("greedy"), std::string::npos) << r.status().to_string();
  auto m = ContinuousBatchingManager::create(runner, sampling_config(), {}).value();
  o.num_return_sequences = 0;
  r = m->add_request({5, 6, 7}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("num_return_sequences must be ≥ 1"), std::string::npos);
  // A sibling id already in use is a clash too.
  RequestOptions taken;
  taken.request_id = "x#1";
  ASSERT_TRUE(m->add_request({5}, taken).ok());
  o.num_return_sequences = 2;
  o.request_id = "x";
  r = m->add_request({5, 6}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'x#1'"), std::string::npos) << r.status().to_string();
}

TEST(ReturnSequences, CancellingTheRequestEndsEverySequence) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  auto m = ContinuousBatchingManager::create(runner, sampling_config(), {}).value();
  RequestOptions o;
  o.request_id = "c";
  o.num_return_sequences = 3;
  o.max_new_tokens = 5;
  ASSERT_TRUE(m->add_request({5, 6, 7, 8}, o).ok());
  ASSERT_TRUE(m->cancel_request("c").ok());  // before start: nothing was forked yet
  ASSERT_TRUE(m->start().ok());
  std::set<std::string> ids;
  for (int n = 0; n < 3; ++n) {
    std::optional<GenerationOutput> out = m->get_result(std::nullopt, 30.0);
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(out->status, RequestStatus::kFailed);
    EXPECT_TRUE(out->cancelled()) << out->request_id;
    ids.insert(out->request_id);
  }
  EXPECT_EQ(ids, (std::set<std::string>{"c", "c#1", "c#2"}));
  EXPECT_EQ(m->cancel_request("c").code(), ErrorCode::kNotFound);
  m->destroy();
}

// A handler registered after every sequence has ended (the server's handler thread
// can lose the CPU between add_request and register_result_handler) still gets
// every sequence's output: the group is gone from the manager by then.
TEST(ReturnSequences, AHandlerRegisteredAfterTheGroupEndedGetsEverySequence) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  auto m = ContinuousBatchingManager::create(runner, sampling_config(), {}).value();
  ASSERT_TRUE(m->start().ok());
  RequestOptions o;
  o.request_id = "g";
  o.num_return_sequences = 3;
  o.max_new_tokens = 3;
  o.seed = 5;
  ASSERT_TRUE(m->add_request({5, 6, 7, 8}, o).ok());
  for (int i = 0; i < 3000 && m->stats().finished < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(m->stats().finished, 3);
  std::mutex mu;
  std::map<std::string, int> finals;
  ASSERT_TRUE(m->register_result_handler("g", [&](const GenerationOutput& out) {
                 std::lock_guard<std::mutex> lk(mu);
                 if (out.is_final()) ++finals[out.request_id];
               }).ok());
  std::lock_guard<std::mutex> lk(mu);
  EXPECT_EQ(finals, (std::map<std::string, int>{{"g", 1}, {"g#1", 1}, {"g#2", 1}}));
  EXPECT_EQ(m->register_result_handler("g", [](const GenerationOutput&) {}).code(), ErrorCode::kNotFound)
      << "every output was taken";
  m->destroy();
}

TEST(ReturnSequences, GenerateBatchGivesEachInputItsSequencesInOrder) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  std::vector<BatchInput> inputs(3);
  inputs[0].input_ids = {5, 6, 7};
  inputs[1].input_ids = {9, 10};
  inputs[1].options.num_return_sequences = 3;
  inputs[1].options.seed = 9;
  inputs[2].input_ids = {11, 12, 13, 14};
  for (auto& in : inputs) in.options.max_new_tokens = 4;
  GenerateBatchOptions opts;
  opts.warmup = false;
  const BatchResult r = generate_batch(runner, inputs, sampling_config(), {}, opts).value();
  ASSERT_EQ(r.outputs.size(), 5u);
  EXPECT_EQ(r.outputs[1].sequence_index, 0);
  const std::string base = r.outputs[1].request_id;
  for (int k = 1; k <= 2; ++k) {
    EXPECT_EQ(r.outputs[static_cast<size_t>(1 + k)].request_id, base + "#" + std::to_string(k));
    EXPECT_EQ(r.outputs[static_cast<size_t>(1 + k)].parent_request_id, base);
    EXPECT_EQ(r.outputs[static_cast<size_t>(1 + k)].generated_tokens,
              alone_sampled(*runner, {9, 10}, 4, 9 + kGolden * static_cast<uint64_t>(k)));
  }
  EXPECT_EQ(r.outputs[4].prompt_ids, inputs[2].input_ids);
  for (const auto& o : r.outputs) EXPECT_EQ(o.status, RequestStatus::kFinished) << o.request_id << ": " << o.error;
}

}  // namespace
}  // namespace loom::batching
