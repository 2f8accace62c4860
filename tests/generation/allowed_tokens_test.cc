// apply_allowed_tokens: the constrained-decoding mask leaves exactly the allowed ids
// (plus the extra ones, such as EOS where a grammar is complete) for the samplers.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "loom/generation/sampling.h"

namespace loom::generation {
namespace {

TEST(AllowedTokens, MasksEverythingElseAndKeepsExtras) {
  const int64_t vocab = 150;  // more than two words, the last one partial
  std::vector<float> logits(vocab);
  for (int64_t i = 0; i < vocab; ++i) logits[i] = static_cast<float>(i % 17);
  std::vector<uint64_t> allowed(2, 0);  // covers ids < 128 only: 128..149 count as disallowed
  for (int id : {3, 64, 65, 127}) allowed[id >> 6] |= uint64_t{1} << (id & 63);
  std::vector<float> row = logits;
  const int64_t n = apply_allowed_tokens(row.data(), vocab, allowed.data(), 128, {140, 3});
  EXPECT_EQ(n, 5);
  for (int64_t i = 0; i < vocab; ++i) {
    const bool keep = i == 3 || i == 64 || i == 65 || i == 127 || i == 140;
    if (keep) EXPECT_EQ(row[i], logits[i]) << i;
    else EXPECT_TRUE(std::isinf(row[i]) && row[i] < 0) << i;
  }
  // Greedy and sampled picks stay inside the allowed set.
  SamplingParams greedy;
  Rng rng(1);
  std::vector<float> g = row;
  const int32_t best = sample_next(g.data(), vocab, greedy, {}, rng, false).id;
  EXPECT_EQ(best, 65);  // 65 % 17 = 14, the largest of the five
  SamplingParams sampled;
  sampled.do_sample = true;
  sampled.temperature = 1.5f;
  sampled.top_k = 50;
  sampled.top_p = 0.99f;
  for (int k = 0; k < 200; ++k) {
    std::vector<float> s = row;
    const int32_t id = sample_next(s.data(), vocab, sampled, {}, rng, false).id;
    EXPECT_TRUE(id == 3 || id == 64 || id == 65 || id == 127 || id == 140) << id;
  }
}

TEST(AllowedTokens, NothingAllowedIsReported) {
  std::vector<float> row(70, 1.0f);
  std::vector<uint64_t> none(2, 0);
  EXPECT_EQ(apply_allowed_tokens(row.data(), 70, none.data(), 70, {}), 0);
}

}  // namespace
}  // namespace loom::generation
