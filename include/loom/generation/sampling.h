// Turning one row of logits into the next token: OpenAI's logit bias, then
// Transformers' processors and warpers in Transformers' order (repetition
// penalty, OpenAI's presence/frequency penalties, temperature, top-k, top-p,
// min-p), then greedy argmax or a draw from a per-request RNG, so a request's
// samples do not depend on its batch mates.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "loom/core/status.h"
#include "loom/core/thread_pool.h"

namespace loom::generation {

struct SamplingParams {
  bool do_sample = false;
  float temperature = 1.0f;
  int32_t top_k = 0;          // 0: off
  float top_p = 1.0f;         // 1: off
  float min_p = 0.0f;         // 0: off
  float repetition_penalty = 1.0f;
  // OpenAI's penalties, over the generated tokens only: a token's logit drops by
  // presence_penalty once it has appeared, and by frequency_penalty per occurrence.
  float presence_penalty = 0.0f;   // [-2, 2]
  float frequency_penalty = 0.0f;  // [-2, 2]
  // OpenAI's logit_bias: added to the raw logits of these ids before anything else.
  std::vector<std::pair<int32_t, float>> logit_bias;  // bias in [-100, 100]

  // Errors name the field; ids of logit_bias are checked against the vocabulary
  // by whoever knows it (vocab > 0 here checks them too).
  Status validate(int64_t vocab = 0) const;
  bool penalizes() const { return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f; }
  // Temperature 0 means greedy, as in most serving APIs.
  bool greedy() const { return !do_sample || temperature <= 0.0f; }
};

// SplitMix-seeded xoshiro256**: small, fast and identical on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1)

 private:
  uint64_t s_[4];
};

struct SampledToken {
  int32_t id = -1;
  float logprob = 0.0f;  // log p(id) under the model's unprocessed distribution
};

struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0.0f;
};

// Buffers sample_next needs, kept between calls so that a token costs no heap
// allocation once they have grown to the vocabulary: one per sequence or per
// thread (sampling several sequences at once needs one each).
struct SamplingScratch {
  std::vector<float> raw;          // the row before bias and penalties, for its logprob
  std::vector<int32_t> counts;     // per vocabulary id, all zero between calls: penalties' tallies
  std::vector<uint32_t> keys, keys_tmp;  // candidates' sort keys (radix sort)
  std::vector<int32_t> ids, ids_tmp;     // candidates, most likely first once sorted
  std::vector<float> heap;         // top-k: the k largest logits seen
  std::vector<double> prob;        // candidates' probabilities
};

// Applies the penalty in place: for every token in `context`, a positive logit is
// divided by `penalty`, a negative one multiplied (Transformers' semantics).
void apply_repetition_penalty(float* logits, int64_t vocab, std::span<const int32_t> context, float penalty,
                              SamplingScratch& scratch);
void apply_repetition_penalty(float* logits, int64_t vocab, const std::vector<int32_t>& context, float penalty);

// OpenAI's presence/frequency penalties in place, counting context[generated_begin:].
void apply_presence_frequency_penalties(float* logits, int64_t vocab, std::span<const int32_t> context,
                                        size_t generated_begin, float presence, float frequency, SamplingScratch& scratch);
void apply_presence_frequency_penalties(float* logits, int64_t vocab, const std::vector<int32_t>& context,
                                        size_t generated_begin, float presence, float frequency);

// Picks the next token from `logits` (modified in place). `context` (prompt +
// generated tokens) feeds the repetition penalty; its tokens from
// `generated_begin` on (the generated ones) feed the presence and frequency
// penalties. with_logprob: also fill SampledToken::logprob, a log-sum-exp over
// the whole vocabulary (1-2 ms for 128K entries); without it logprob stays 0.
// Top-k selects its candidates without a vocabulary-sized pass over indices;
// without top-k every id is a candidate, sorted most likely first (ties: lower id).
SampledToken sample_next(float* logits, int64_t vocab, const SamplingParams& params, std::span<const int32_t> context,
                         Rng& rng, bool with_logprob, size_t generated_begin, SamplingScratch& scratch);
// The same with buffers of its own (allocates): for one-off calls and tests.
SampledToken sample_next(float* logits, int64_t vocab, const SamplingParams& params,
                         const std::vector<int32_t>& context, Rng& rng, bool with_logprob = true,
                         size_t generated_begin = 0);

// One row of a step to sample: sample_next's arguments, and where its token goes.
struct SampleJob {
  float* logits = nullptr;
  const SamplingParams* params = nullptr;
  std::span<const int32_t> context;
  size_t generated_begin = 0;
  Rng* rng = nullptr;
  bool with_logprob = false;
  SampledToken result;
};

// Samples the rows of a step across a thread pool: each job gets the token
// sample_next alone would give it (it draws only from its own Rng), whatever the
// pool's size. Keeps one scratch per thread, so steps after the first allocate nothing.
class ParallelSampler {
 public:
  void run(std::span<SampleJob> jobs, int64_t vocab, ThreadPool& pool);

 private:
  std::vector<SamplingScratch> scratch_;  // one per pool thread
};

// Constrained decoding: every id whose bit is clear in `allowed` (bit id%64 of word
// id/64; ids ≥ allowed_count count as clear) gets -inf, except the ids of `also_allowed`
// (EOS where the grammar is complete). Greedy and sampled picks then only see allowed
// ids. Returns how many ids stay allowed (0: nothing can be sampled).
int64_t apply_allowed_tokens(float* logits, int64_t vocab, const uint64_t* allowed, int64_t allowed_count,
                             const std::vector<int32_t>& also_allowed);

// log softmax of one logit: logits[id] - logsumexp(logits).
float token_logprob(const float* logits, int64_t vocab, int32_t id);

// The k most likely tokens of the (unprocessed) row with their log-probabilities,
// most likely first; ties go to the lower id.
std::vector<TokenLogprob> top_logprobs(const float* logits, int64_t vocab, int32_t k);

}  // namespace loom::generation
