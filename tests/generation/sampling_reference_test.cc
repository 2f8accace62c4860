// sample_next (scratch buffers, radix-sorted candidates, heap top-k, tallied
// penalties) against a plain implementation of the same rules — full index array,
// comparison sort, sorted copies of the context — on random rows and settings:
// same token and logprob for the same seed. And ParallelSampler against
// sample_next one row at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "loom/core/thread_pool.h"
#include "loom/generation/sampling.h"

namespace loom::generation {
namespace sampling_reference {

float reference_logprob(const float* logits, int64_t vocab, int32_t id) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  return static_cast<float>(logits[id] - mx - std::log(sum));
}

SampledToken reference_sample(float* logits, int64_t vocab, const SamplingParams& p, const std::vector<int32_t>& context,
                              Rng& rng, size_t generated_begin) {
  const std::vector<float> raw(logits, logits + vocab);
  for (const auto& [id, bias] : p.logit_bias) logits[id] += bias;
  if (p.repetition_penalty != 1.0f) {
    std::vector<int32_t> ids(context);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (int32_t id : ids) logits[id] = logits[id] < 0 ? logits[id] * p.repetition_penalty : logits[id] / p.repetition_penalty;
  }
  if ((p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) && generated_begin < context.size()) {
    std::vector<int32_t> ids(context.begin() + static_cast<std::ptrdiff_t>(generated_begin), context.end());
    std::sort(ids.begin(), ids.end());
    for (size_t i = 0; i < ids.size();) {
      size_t j = i;
      while (j < ids.size() && ids[j] == ids[i]) ++j;
      logits[ids[i]] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(j - i);
      i = j;
    }
  }
  SampledToken out;
  if (p.greedy()) {
    out.id = static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
    out.logprob = reference_logprob(raw.data(), vocab, out.id);
    return out;
  }
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::sort(idx.begin(), idx.end(), by_logit);
  size_t n = idx.size();
  if (p.top_k > 0 && p.top_k < vocab) {
    const float kth = logits[idx[static_cast<size_t>(p.top_k - 1)]];
    while (logits[idx[n - 1]] < kth) --n;
  }
  std::vector<double> prob(n);
  const float inv_t = 1.0f / p.temperature;
  const double mx = static_cast<double>(logits[idx[0]]) * inv_t;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += prob[i] = std::exp(static_cast<double>(logits[idx[i]]) * inv_t - mx);
  for (double& q : prob) q /= sum;
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < n; ++i)
      if ((cum += prob[i]) >= p.top_p) {
        n = i + 1;
        break;
      }
  }
  if (p.min_p > 0.0f) {
    size_t keep = 1;
    while (keep < n && prob[keep] >= prob[0] * p.min_p) ++keep;
    n = keep;
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += prob[i];
  double u = rng.uniform() * total;
  size_t chosen = n - 1;
  for (size_t i = 0; i < n; ++i)
    if ((u -= prob[i]) < 0) {
      chosen = i;
      break;
    }
  out.id = idx[chosen];
  out.logprob = reference_logprob(raw.data(), vocab, out.id);
  return out;
}

struct Case {
  SamplingParams params;
  std::vector<float> row;
  std::vector<int32_t> context;
  size_t generated_begin = 0;
  uint64_t seed = 0;
};

// Rows with ties (values on a coarse grid), -inf entries, ±0 and a spread of
// settings; vocabularies below and above the small-sort cut and top-k's heap limit.
Case random_case(std::mt19937& g) {
  Case c;
  const int64_t vocabs[] = {1, 3, 50, 64, 65, 300, 4096};
  const int64_t vocab = vocabs[g() % std::size(vocabs)];
  std::uniform_real_distribution<float> value(-8.0f, 8.0f);
  c.row.resize(static_cast<size_t>(vocab));
  const bool coarse = g() % 2 == 0;
  for (float& x : c.row) {
    x = value(g);
    if (coarse) x = std::round(x * 2.0f) / 2.0f;
    if (g() % 50 == 0) x = -std::numeric_limits<float>::infinity();
    if (g() % 60 == 0) x = g() % 2 ? 0.0f : -0.0f;
  }
  c.row[g() % static_cast<size_t>(vocab)] = 9.0f;  // at least one finite entry
  SamplingParams& p = c.params;
  p.do_sample = g() % 5 != 0;
  p.temperature = std::uniform_real_distribution<float>(0.2f, 2.0f)(g);
  if (g() % 2) p.top_k = static_cast<int32_t>(1 + g() % (vocab + 300 < 600 ? vocab + 2 : 600));
  if (g() % 2) p.top_p = std::uniform_real_distribution<float>(0.05f, 1.0f)(g);
  if (g() % 3 == 0) p.min_p = std::uniform_real_distribution<float>(0.0f, 0.5f)(g);
  if (g() % 3 == 0) p.repetition_penalty = std::uniform_real_distribution<float>(0.5f, 2.0f)(g);
  if (g() % 3 == 0) p.presence_penalty = std::uniform_real_distribution<float>(-2.0f, 2.0f)(g);
  if (g() % 3 == 0) p.frequency_penalty = std::uniform_real_distribution<float>(-2.0f, 2.0f)(g);
  if (g() % 4 == 0) p.logit_bias.push_back({static_cast<int32_t>(g() % vocab), 5.0f});
  const size_t context = g() % 40;
  for (size_t i = 0; i < context; ++i) c.context.push_back(static_cast<int32_t>(g() % std::min<int64_t>(vocab, 12)));
  c.generated_begin = context == 0 ? 0 : g() % (context + 1);
  c.seed = g();
  return c;
}

TEST(SamplingReference, SameTokensAndLogprobsAsPlainImplementation) {
  std::mt19937 g(2024);
  SamplingScratch scratch;  // reused across cases of every size, as the batching loop does
  for (int t = 0; t < 3000; ++t) {
    const Case c = random_case(g);
    const int64_t vocab = static_cast<int64_t>(c.row.size());
    ASSERT_TRUE(c.params.validate(vocab).ok());
    for (int draw = 0; draw < 3; ++draw) {
      Rng a(c.seed + static_cast<uint64_t>(draw)), b(c.seed + static_cast<uint64_t>(draw));
      std::vector<float> ra = c.row, rb = c.row;
      const SampledToken want = reference_sample(ra.data(), vocab, c.params, c.context, a, c.generated_begin);
      const SampledToken got =
          sample_next(rb.data(), vocab, c.params, c.context, b, /*with_logprob=*/true, c.generated_begin, scratch);
      ASSERT_EQ(got.id, want.id) << "case " << t << " vocab " << vocab << " top_k " << c.params.top_k;
      ASSERT_EQ(got.logprob, want.logprob) << "case " << t;
      ASSERT_EQ(a.next(), b.next()) << "case " << t << ": a different number of draws";
      ASSERT_EQ(ra, rb) << "case " << t << ": the processed rows differ";
    }
  }
  // Penalties leave their tallies at zero: a later call without them sees none.
  ASSERT_TRUE(std::all_of(scratch.counts.begin(), scratch.counts.end(), [](int32_t c) { return c == 0; }));
}

TEST(SamplingReference, TopLogprobsAreTheBestByValueThenId) {
  std::mt19937 g(7);
  for (int t = 0; t < 200; ++t) {
    Case c = random_case(g);
    const int64_t vocab = static_cast<int64_t>(c.row.size());
    const int32_t k = static_cast<int32_t>(1 + g() % 20);
    std::vector<int32_t> idx(c.row.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return c.row[a] > c.row[b]; });
    const std::vector<TokenLogprob> top = top_logprobs(c.row.data(), vocab, k);
    ASSERT_EQ(top.size(), std::min<size_t>(static_cast<size_t>(k), c.row.size()));
    for (size_t i = 0; i < top.size(); ++i) {
      EXPECT_EQ(top[i].id, idx[i]) << "case " << t << " rank " << i;
      const float want = token_logprob(c.row.data(), vocab, idx[i]);
      if (std::isinf(want)) EXPECT_EQ(top[i].logprob, want);
      else EXPECT_NEAR(top[i].logprob, want, 1e-5);
    }
  }
}

TEST(SamplingReference, ParallelSamplerEqualsSequentialSampling) {
  std::mt19937 g(99);
  const int64_t vocab = 4096;
  const size_t rows = 37;
  std::vector<Case> cases;
  for (size_t i = 0; i < rows; ++i) {
    Case c;
    do c = random_case(g);
    while (static_cast<int64_t>(c.row.size()) != vocab);
    cases.push_back(std::move(c));
  }
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    ParallelSampler sampler;
    std::vector<Rng> rngs, expected_rngs;
    for (const Case& c : cases) {
      rngs.emplace_back(c.seed);
      expected_rngs.emplace_back(c.seed);
    }
    for (int step = 0; step < 4; ++step) {  // the RNGs advance: each step draws anew
      std::vector<std::vector<float>> parallel_rows, sequential_rows;
      std::vector<SampleJob> jobs(rows);
      for (size_t i = 0; i < rows; ++i) {
        parallel_rows.push_back(cases[i].row);
        sequential_rows.push_back(cases[i].row);
        jobs[i].logits = parallel_rows[i].data();
        jobs[i].params = &cases[i].params;
        jobs[i].context = cases[i].context;
        jobs[i].generated_begin = cases[i].generated_begin;
        jobs[i].rng = &rngs[i];
        jobs[i].with_logprob = i % 2 == 0;
      }
      sampler.run(jobs, vocab, pool);
      for (size_t i = 0; i < rows; ++i) {
        const SampledToken want = sample_next(sequential_rows[i].data(), vocab, cases[i].params, cases[i].context,
                                              expected_rngs[i], i % 2 == 0, cases[i].generated_begin);
        ASSERT_EQ(jobs[i].result.id, want.id) << threads << " threads, step " << step << ", row " << i;
        ASSERT_EQ(jobs[i].result.logprob, want.logprob);
      }
    }
  }
}

}  // namespace sampling_reference
}  // namespace loom::generation
