// Per-request log-probabilities (the server's logprobs, top_logprobs, and echo's
// prompt logprobs) equal what a full forward over the same tokens gives, however
// the request was chunked, cached or batched.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "batching_test_util.h"
#include "loom/generation/sampling.h"
#include "loom/runtime/kv_cache_contiguous.h"

namespace loom::batching {
namespace {

using testing::load_fixture;
using testing::make_runner;
using testing::random_tokens;

// log p(tokens[i] | tokens[:i]) for i ≥ 1, from one forward with every row.
std::vector<float> full_forward_logprobs(ModelRunner& runner, const std::vector<int32_t>& tokens) {
  runtime::ContiguousKvCache cache(runner.kv_layout(), 1, static_cast<int64_t>(tokens.size()));
  const Tensor logits =
      runner.step({{tokens.data(), static_cast<int64_t>(tokens.size()), 0}}, cache, LogitsRows::kAllTokens).value();
  const int64_t vocab = runner.model().vocab_size();
  std::vector<float> out;
  for (size_t i = 1; i < tokens.size(); ++i)
    out.push_back(generation::token_logprob(logits.data_as<float>() + (i - 1) * vocab, vocab, tokens[i]));
  return out;
}

GenerationOutput run_one(ContinuousBatchingManager& m, const std::vector<int32_t>& prompt, RequestOptions o) {
  const std::string id = m.add_request(prompt, o).value();
  while (true) {
    std::optional<GenerationOutput> out = m.get_result(id, 30.0);
    if (!out) throw Error(internal_error("no result for " + id));
    if (out->is_final()) return *out;
  }
}

struct Case {
  const char* name;
  int64_t max_batch_tokens;  // small: the prompt is prefilled in chunks
  bool sharing;
};

class RequestLogprobs : public ::testing::TestWithParam<Case> {};

TEST_P(RequestLogprobs, MatchFullForward) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  const int64_t vocab = model->vocab_size();
  ContinuousBatchingConfig cfg;
  cfg.page_size = 16;
  cfg.num_blocks = 64;
  cfg.max_batch_tokens = GetParam().max_batch_tokens;
  cfg.allow_block_sharing = GetParam().sharing;
  GenerationConfig gc = testing::no_eos_config();
  auto m = ContinuousBatchingManager::create(runner, gc, cfg).value();
  ASSERT_TRUE(m->start().ok());

  std::mt19937 rng(7);
  const std::vector<int32_t> prompt = random_tokens(rng, 37, vocab);
  RequestOptions o;
  o.max_new_tokens = 6;
  o.logprobs = true;
  o.top_logprobs = 3;
  o.prompt_logprobs = 2;
  // Twice: the second run finds the prompt in the prefix cache, and must still
  // compute every prompt row. A distractor runs alongside it.
  for (int round = 0; round < 2; ++round) {
    RequestOptions other;
    other.max_new_tokens = 5;
    const std::string distractor = m->add_request(random_tokens(rng, 20, vocab), other).value();
    const GenerationOutput out = run_one(*m, prompt, o);
    ASSERT_EQ(out.status, RequestStatus::kFinished) << out.error;
    ASSERT_EQ(out.generated_tokens.size(), 6u);

    std::vector<int32_t> all = prompt;
    all.insert(all.end(), out.generated_tokens.begin(), out.generated_tokens.end());
    const std::vector<float> want = full_forward_logprobs(*runner, all);
    ASSERT_EQ(out.prompt_logprobs.size(), prompt.size() - 1);
    ASSERT_EQ(out.prompt_top_logprobs.size(), prompt.size() - 1);
    for (size_t i = 0; i < out.prompt_logprobs.size(); ++i) {
      EXPECT_NEAR(out.prompt_logprobs[i], want[i], 1e-4) << "prompt position " << i + 1 << ", round " << round;
      ASSERT_EQ(out.prompt_top_logprobs[i].size(), 2u);
      EXPECT_GE(out.prompt_top_logprobs[i][0].logprob, out.prompt_top_logprobs[i][1].logprob);
      EXPECT_GE(out.prompt_top_logprobs[i][0].logprob + 1e-6f, out.prompt_logprobs[i]);
    }
    ASSERT_EQ(out.logprobs.size(), 6u);
    ASSERT_EQ(out.top_logprobs.size(), 6u);
    for (size_t k = 0; k < 6; ++k) {
      EXPECT_NEAR(out.logprobs[k], want[prompt.size() - 1 + k], 1e-4) << "generated token " << k;
      // Greedy: the chosen token is the most likely one.
      EXPECT_EQ(out.top_logprobs[k][0].id, out.generated_tokens[k]);
      EXPECT_NEAR(out.top_logprobs[k][0].logprob, out.logprobs[k], 1e-5);
    }
    while (true) {
      std::optional<GenerationOutput> d = m->get_result(distractor, 30.0);
      ASSERT_TRUE(d.has_value());
      if (d->is_final()) break;
    }
  }
  // A plain request keeps paying nothing: no logprobs at all.
  RequestOptions plain;
  plain.max_new_tokens = 3;
  const GenerationOutput p = run_one(*m, prompt, plain);
  EXPECT_TRUE(p.logprobs.empty());
  EXPECT_TRUE(p.prompt_logprobs.empty());
  EXPECT_TRUE(p.top_logprobs.empty());
  m->destroy();
}

INSTANTIATE_TEST_SUITE_P(Chunking, RequestLogprobs,
                         ::testing::Values(Case{"whole_prompt_one_step", 256, true}, Case{"chunks_of_8", 8, true},
                                           Case{"no_prefix_cache", 256, false}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(RequestLogprobs, BiasAndPenaltiesReachTheManager) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  ContinuousBatchingConfig cfg;
  cfg.page_size = 16;
  cfg.num_blocks = 32;
  cfg.per_request_processors = true;
  auto m = ContinuousBatchingManager::create(runner, testing::no_eos_config(), cfg).value();
  ASSERT_TRUE(m->start().ok());
  std::mt19937 rng(3);
  const std::vector<int32_t> prompt = random_tokens(rng, 10, model->vocab_size());
  RequestOptions o;
  o.max_new_tokens = 4;
  o.logit_bias = {{5, 100.0f}};
  const GenerationOutput forced = run_one(*m, prompt, o);
  EXPECT_EQ(forced.generated_tokens, std::vector<int32_t>(4, 5));
  // A frequency penalty stronger than the bias's lead pushes the token away after it appeared.
  o.logit_bias = {{5, 10.0f}};
  o.frequency_penalty = 2.0f;
  o.presence_penalty = 2.0f;
  o.max_new_tokens = 12;
  const GenerationOutput penalized = run_one(*m, prompt, o);
  ASSERT_EQ(penalized.status, RequestStatus::kFinished);
  EXPECT_EQ(penalized.generated_tokens[0], 5);
  EXPECT_LT(std::count(penalized.generated_tokens.begin(), penalized.generated_tokens.end(), 5), 12);
  RequestOptions bad;
  bad.logit_bias = {{static_cast<int32_t>(model->vocab_size()), 1.0f}};
  EXPECT_EQ(m->add_request(prompt, bad).status().code(), ErrorCode::kOutOfRange);
  m->destroy();
}

}  // namespace
}  // namespace loom::batching
