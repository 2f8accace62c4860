#include "loom/generation/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "loom/generation/stopping.h"

namespace loom::generation {
namespace {

TEST(Sampling, GreedyPicksFirstMaximum) {
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f};
  Rng rng(1);
  SamplingParams p;
  EXPECT_EQ(sample_next(l.data(), 4, p, {}, rng).id, 1);
}

TEST(Sampling, RepetitionPenaltyFollowsTransformers) {
  std::vector<float> l = {2.0f, -2.0f, 1.0f};
  apply_repetition_penalty(l.data(), 3, {0, 1, 1}, 2.0f);
  EXPECT_FLOAT_EQ(l[0], 1.0f);   // positive: divided
  EXPECT_FLOAT_EQ(l[1], -4.0f);  // negative: multiplied, once despite two occurrences
  EXPECT_FLOAT_EQ(l[2], 1.0f);
}

TEST(Sampling, SameSeedSameTokens) {
  SamplingParams p;
  p.do_sample = true;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  std::vector<float> base(100);
  for (int i = 0; i < 100; ++i) base[i] = std::sin(i * 0.37f) * 3;
  auto run = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) {
      auto l = base;
      out.push_back(sample_next(l.data(), 100, p, out, rng).id);
    }
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampling, FrequenciesMatchSoftmaxAndTopKTopPRestrict) {
  std::vector<float> base = {2.0f, 1.0f, 0.0f, -1.0f};
  SamplingParams p;
  p.do_sample = true;
  Rng rng(7);
  std::map<int, int> counts;
  const int n = 40000;
  for (int i = 0; i < n; ++i) {
    auto l = base;
    counts[sample_next(l.data(), 4, p, {}, rng).id]++;
  }
  double z = 0;
  for (float x : base) z += std::exp(x);
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(counts[k] / double(n), std::exp(base[k]) / z, 0.01) << k;

  p.top_k = 2;
  for (int i = 0; i < 2000; ++i) {
    auto l = base;
    EXPECT_LT(sample_next(l.data(), 4, p, {}, rng).id, 2);
  }
  p.top_k = 0;
  p.top_p = 0.5f;  // p(0) ≈ 0.64 ≥ 0.5: only token 0 survives
  for (int i = 0; i < 2000; ++i) {
    auto l = base;
    EXPECT_EQ(sample_next(l.data(), 4, p, {}, rng).id, 0);
  }
  p.top_p = 1.0f;
  p.min_p = 0.3f;  // p(1)/p(0) = e^-1 ≈ 0.37 kept, p(2)/p(0) ≈ 0.14 dropped
  for (int i = 0; i < 2000; ++i) {
    auto l = base;
    EXPECT_LT(sample_next(l.data(), 4, p, {}, rng).id, 2);
  }
}

TEST(Sampling, LogprobIsOfRawDistribution) {
  std::vector<float> l = {0.0f, std::log(3.0f)};
  EXPECT_NEAR(token_logprob(l.data(), 2, 1), std::log(0.75), 1e-6);
}

TEST(Sampling, SampledLogprobIgnoresThePenaltyAndIsSkippedOnRequest) {
  // Token 1 wins greedily even after the penalty halves its logit; its logprob is that of
  // the unpenalised logits, and asking for none leaves it 0 with the same token.
  const std::vector<float> base = {0.0f, std::log(3.0f) * 4};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  Rng rng(1);
  auto l = base;
  const SampledToken with = sample_next(l.data(), 2, p, {1}, rng);
  EXPECT_EQ(with.id, 1);
  EXPECT_NEAR(with.logprob, token_logprob(base.data(), 2, 1), 1e-6);
  l = base;
  const SampledToken without = sample_next(l.data(), 2, p, {1}, rng, /*with_logprob=*/false);
  EXPECT_EQ(without.id, 1);
  EXPECT_EQ(without.logprob, 0.0f);
}

TEST(Sampling, ValidateNamesTheField) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_NE(p.validate().message().find("top_p"), std::string::npos);
  p = SamplingParams();
  p.temperature = -1;
  EXPECT_NE(p.validate().message().find("temperature"), std::string::npos);
}

TEST(StopStrings, HoldsBackPartialMatchesAndCutsAtTheStop) {
  StopStringMatcher m({"END", "\n\n"});
  std::string shown;
  for (const char* piece : {"Hello E", "N", "x wor", "ld\n", "\nmore"}) shown += m.push(piece);
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(shown, "Hello ENx world");
  EXPECT_EQ(m.matched(), "\n\n");
  EXPECT_EQ(m.flush(), "");

  StopStringMatcher none({"zzz"});
  std::string all = none.push("abz");
  all += none.push("z");
  EXPECT_EQ(all, "ab");
  EXPECT_EQ(none.flush(), "zz");
}

}  // namespace
}  // namespace loom::generation

namespace loom::generation {
namespace {

TEST(Sampling, LogitBiasIsAddedBeforeGreedyChoice) {
  std::vector<float> l = {3.0f, 1.0f, 2.0f};
  SamplingParams p;
  p.logit_bias = {{1, 2.5f}};
  Rng rng(0);
  const SampledToken t = sample_next(l.data(), 3, p, {}, rng);
  EXPECT_EQ(t.id, 1);  // 1 + 2.5 beats 3
  // The reported logprob is the raw model's, not the biased one.
  const std::vector<float> raw = {3.0f, 1.0f, 2.0f};
  EXPECT_NEAR(t.logprob, token_logprob(raw.data(), 3, 1), 1e-6);
}

TEST(Sampling, PresenceAndFrequencyPenaltiesCountOnlyGeneratedTokens) {
  // OpenAI: logit -= count * frequency + (count > 0) * presence, over the generated tokens.
  std::vector<float> l = {5.0f, 4.0f, 3.0f, 0.0f};
  const std::vector<int32_t> context = {2, 2, /*generated:*/ 0, 0, 0, 1};
  apply_presence_frequency_penalties(l.data(), 4, context, /*generated_begin=*/2, /*presence=*/0.5f, /*frequency=*/1.0f);
  EXPECT_FLOAT_EQ(l[0], 5.0f - 3.0f - 0.5f);
  EXPECT_FLOAT_EQ(l[1], 4.0f - 1.0f - 0.5f);
  EXPECT_FLOAT_EQ(l[2], 3.0f);  // only in the prompt
  EXPECT_FLOAT_EQ(l[3], 0.0f);
}

TEST(Sampling, FrequencyPenaltyChangesTheGreedyToken) {
  std::vector<float> l = {2.0f, 1.5f};
  SamplingParams p;
  p.frequency_penalty = 1.0f;
  Rng rng(0);
  EXPECT_EQ(sample_next(l.data(), 2, p, {0}, rng, true, /*generated_begin=*/0).id, 1);
  std::vector<float> again = {2.0f, 1.5f};
  EXPECT_EQ(sample_next(again.data(), 2, p, {0}, rng, true, /*generated_begin=*/1).id, 0);  // token 0 was prompt
}

TEST(Sampling, ValidateNamesTheBadPenaltyOrBias) {
  SamplingParams p;
  p.presence_penalty = 2.5f;
  EXPECT_NE(p.validate().message().find("presence_penalty"), std::string::npos);
  p = SamplingParams{};
  p.frequency_penalty = -3.0f;
  EXPECT_NE(p.validate().message().find("frequency_penalty"), std::string::npos);
  p = SamplingParams{};
  p.logit_bias = {{7, 1.0f}};
  EXPECT_EQ(p.validate(/*vocab=*/7).code(), ErrorCode::kOutOfRange);
  EXPECT_TRUE(p.validate(8).ok());
  p.logit_bias = {{1, 101.0f}};
  EXPECT_NE(p.validate(8).message().find("logit_bias"), std::string::npos);
}

TEST(Sampling, TopLogprobsAreTheLargestInOrderAndNormalized) {
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  const std::vector<TokenLogprob> top = top_logprobs(l.data(), 5, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 1);  // ties: the lower id first
  EXPECT_EQ(top[1].id, 3);
  EXPECT_EQ(top[2].id, 4);
  double sum = 0;
  for (float x : l) sum += std::exp(static_cast<double>(x));
  for (const TokenLogprob& t : top) EXPECT_NEAR(t.logprob, l[static_cast<size_t>(t.id)] - std::log(sum), 1e-5);
  EXPECT_EQ(top_logprobs(l.data(), 5, 9).size(), 5u);
  EXPECT_TRUE(top_logprobs(l.data(), 5, 0).empty());
}

}  // namespace
}  // namespace loom::generation
