#include "loom/generation/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <iterator>
#include <numeric>

namespace loom::generation {

Status SamplingParams::validate(int64_t vocab) const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) return invalid_argument("temperature must be ≥ 0, got " + std::to_string(temperature));
  if (top_k < 0) return invalid_argument("top_k must be ≥ 0, got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) return invalid_argument("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return invalid_argument("min_p must be in [0, 1], got " + std::to_string(min_p));
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    return invalid_argument("repetition_penalty must be > 0, got " + std::to_string(repetition_penalty));
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return invalid_argument("presence_penalty must be in [-2, 2], got " + std::to_string(presence_penalty));
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return invalid_argument("frequency_penalty must be in [-2, 2], got " + std::to_string(frequency_penalty));
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || (vocab > 0 && id >= vocab))
      return out_of_range("logit_bias: token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                          std::to_string(vocab) + ")");
    if (!(bias >= -100.0f && bias <= 100.0f))
      return invalid_argument("logit_bias: the bias of token " + std::to_string(id) + " must be in [-100, 100], got " +
                              std::to_string(bias));
  }
  return Status::Ok();
}

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

void Rng::reseed(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

namespace {
// Sized to the vocabulary once; every entry is zero again when a penalty returns.
int32_t* zeroed_counts(SamplingScratch& scratch, int64_t vocab) {
  if (scratch.counts.size() < static_cast<size_t>(vocab)) scratch.counts.resize(static_cast<size_t>(vocab), 0);
  return scratch.counts.data();
}
}  // namespace

void apply_repetition_penalty(float* logits, int64_t vocab, std::span<const int32_t> context, float penalty,
                              SamplingScratch& scratch) {
  if (penalty == 1.0f || context.empty()) return;
  // Each distinct token is penalised once, however often it occurs.
  int32_t* seen = zeroed_counts(scratch, vocab);
  for (int32_t id : context) {
    if (id < 0 || id >= vocab || seen[id]) continue;
    seen[id] = 1;
    float& l = logits[id];
    l = l < 0 ? l * penalty : l / penalty;
  }
  for (int32_t id : context)
    if (id >= 0 && id < vocab) seen[id] = 0;
}

void apply_repetition_penalty(float* logits, int64_t vocab, const std::vector<int32_t>& context, float penalty) {
  SamplingScratch scratch;
  apply_repetition_penalty(logits, vocab, std::span<const int32_t>(context), penalty, scratch);
}

void apply_presence_frequency_penalties(float* logits, int64_t vocab, std::span<const int32_t> context,
                                        size_t generated_begin, float presence, float frequency, SamplingScratch& scratch) {
  if ((presence == 0.0f && frequency == 0.0f) || generated_begin >= context.size()) return;
  const std::span<const int32_t> generated = context.subspan(generated_begin);
  int32_t* count = zeroed_counts(scratch, vocab);
  for (int32_t id : generated)
    if (id >= 0 && id < vocab) ++count[id];
  for (int32_t id : generated) {
    if (id < 0 || id >= vocab || count[id] == 0) continue;
    logits[id] -= presence + frequency * static_cast<float>(count[id]);
    count[id] = 0;
  }
}

void apply_presence_frequency_penalties(float* logits, int64_t vocab, const std::vector<int32_t>& context,
                                        size_t generated_begin, float presence, float frequency) {
  SamplingScratch scratch;
  apply_presence_frequency_penalties(logits, vocab, std::span<const int32_t>(context), generated_begin, presence,
                                     frequency, scratch);
}

std::vector<TokenLogprob> top_logprobs(const float* logits, int64_t vocab, int32_t k) {
  std::vector<TokenLogprob> out;
  if (k <= 0 || vocab <= 0) return out;
  k = static_cast<int32_t>(std::min<int64_t>(k, vocab));
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  // The k best seen so far, as a heap whose top is the worst of them.
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::vector<int32_t> best;
  best.reserve(static_cast<size_t>(k));
  for (int32_t i = 0; i < static_cast<int32_t>(vocab); ++i) {
    if (best.size() < static_cast<size_t>(k)) {
      best.push_back(i);
      std::push_heap(best.begin(), best.end(), better);
    } else if (better(i, best.front())) {
      std::pop_heap(best.begin(), best.end(), better);
      best.back() = i;
      std::push_heap(best.begin(), best.end(), better);
    }
  }
  std::sort_heap(best.begin(), best.end(), better);
  out.reserve(best.size());
  for (int32_t id : best) out.push_back({id, logits[id] - lse});
  return out;
}

float token_logprob(const float* logits, int64_t vocab, int32_t id) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  return static_cast<float>(logits[id] - mx - std::log(sum));
}

namespace {
int32_t argmax(const float* logits, int64_t vocab) {
  // First maximum wins, like torch.argmax.
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}
}  // namespace

int64_t apply_allowed_tokens(float* logits, int64_t vocab, const uint64_t* allowed, int64_t allowed_count,
                             const std::vector<int32_t>& also_allowed) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // The logits of also_allowed ids, restored after masking (a few EOS ids: on the stack).
  float kept_small[8];
  std::vector<float> kept_large;
  float* kept = kept_small;
  if (also_allowed.size() > std::size(kept_small)) {
    kept_large.resize(also_allowed.size());
    kept = kept_large.data();
  }
  for (size_t i = 0; i < also_allowed.size(); ++i) {
    const int32_t id = also_allowed[i];
    kept[i] = id >= 0 && id < vocab ? logits[id] : kNegInf;
  }
  int64_t count = 0;
  const int64_t covered = std::min(vocab, allowed_count);
  for (int64_t w = 0; w * 64 < covered; ++w) {
    const uint64_t bits = allowed[w];
    const int64_t end = std::min<int64_t>(covered, (w + 1) * 64);
    if (bits == ~uint64_t{0} && end == (w + 1) * 64) {
      count += 64;
      continue;
    }
    for (int64_t id = w * 64; id < end; ++id) {
      if ((bits >> (id & 63)) & 1) ++count;
      else logits[id] = kNegInf;
    }
  }
  for (int64_t id = covered; id < vocab; ++id) logits[id] = kNegInf;
  for (size_t i = 0; i < also_allowed.size(); ++i) {
    const int32_t id = also_allowed[i];
    if (id < 0 || id >= vocab) continue;
    const bool was_allowed = id < covered && ((allowed[id >> 6] >> (id & 63)) & 1);
    if (!was_allowed) {
      logits[id] = kept[i];
      ++count;
    }
  }
  return count;
}

namespace {
// Orders floats from largest to smallest as unsigned integers, -0 with +0: the order
// "higher logit first, ties to the lower id" becomes a stable sort of these keys.
uint32_t descending_key(float f) {
  if (f == 0.0f) f = 0.0f;
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ~u;
}

// Sorts scratch.ids[0, n) by descending logit, ties by ascending id, given ids in
// ascending order: a stable LSD radix sort of the keys, a byte a pass, skipping
// bytes every key shares (typically the exponent's).
void sort_candidates(const float* logits, size_t n, SamplingScratch& s) {
  if (n < 2) return;
  if (n <= 64) {
    int32_t* ids = s.ids.data();
    std::sort(ids, ids + n, [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    return;
  }
  s.keys.resize(n);
  s.keys_tmp.resize(n);
  s.ids_tmp.resize(std::max(s.ids_tmp.size(), n));
  uint32_t* keys = s.keys.data();
  int32_t* ids = s.ids.data();
  for (size_t i = 0; i < n; ++i) keys[i] = descending_key(logits[ids[i]]);
  uint32_t* kin = keys;
  uint32_t* kout = s.keys_tmp.data();
  int32_t* iin = ids;
  int32_t* iout = s.ids_tmp.data();
  for (int shift = 0; shift < 32; shift += 8) {
    size_t count[257] = {};
    for (size_t i = 0; i < n; ++i) ++count[((kin[i] >> shift) & 0xff) + 1];
    if (count[((kin[0] >> shift) & 0xff) + 1] == n) continue;
    for (int d = 0; d < 256; ++d) count[d + 1] += count[d];
    for (size_t i = 0; i < n; ++i) {
      const size_t at = count[(kin[i] >> shift) & 0xff]++;
      kout[at] = kin[i];
      iout[at] = iin[i];
    }
    std::swap(kin, kout);
    std::swap(iin, iout);
  }
  if (iin != ids) std::copy(iin, iin + n, ids);
}

// The k-th largest logit (k < vocab), counting equal values separately.
float kth_largest(const float* logits, int64_t vocab, int32_t k, SamplingScratch& s) {
  std::vector<float>& h = s.heap;
  if (k > 256) {  // a heap pays log k a candidate: select over a copy instead
    h.assign(logits, logits + vocab);
    std::nth_element(h.begin(), h.begin() + (k - 1), h.end(), std::greater<float>());
    return h[static_cast<size_t>(k - 1)];
  }
  h.assign(logits, logits + k);
  std::make_heap(h.begin(), h.end(), std::greater<float>());
  for (int64_t i = k; i < vocab; ++i) {
    if (!(logits[i] > h.front())) continue;
    std::pop_heap(h.begin(), h.end(), std::greater<float>());
    h.back() = logits[i];
    std::push_heap(h.begin(), h.end(), std::greater<float>());
  }
  return h.front();
}
}  // namespace

SampledToken sample_next(float* logits, int64_t vocab, const SamplingParams& p, std::span<const int32_t> context,
                         Rng& rng, bool with_logprob, size_t generated_begin, SamplingScratch& scratch) {
  // The logprob reported is that of the raw model distribution, as the OpenAI API does:
  // a copy is kept only when a bias or penalty is about to change the logits.
  const bool modified = !p.logit_bias.empty() || (p.penalizes() && !context.empty());
  const float* unprocessed = logits;
  if (with_logprob && modified) {
    scratch.raw.assign(logits, logits + vocab);
    unprocessed = scratch.raw.data();
  }
  for (const auto& [id, bias] : p.logit_bias)
    if (id >= 0 && id < vocab) logits[id] += bias;
  apply_repetition_penalty(logits, vocab, context, p.repetition_penalty, scratch);
  apply_presence_frequency_penalties(logits, vocab, context, generated_begin, p.presence_penalty, p.frequency_penalty,
                                     scratch);
  SampledToken out;
  if (p.greedy()) {
    out.id = argmax(logits, vocab);
    if (with_logprob) out.logprob = token_logprob(unprocessed, vocab, out.id);
    return out;
  }
  const float inv_t = 1.0f / p.temperature;
  // Candidates, sorted by descending logit; top-k (ties at the k-th value kept, as
  // Transformers' TopKLogitsWarper does) trims them before the sort.
  std::vector<int32_t>& ids = scratch.ids;
  size_t n = 0;
  if (p.top_k > 0 && p.top_k < vocab) {
    const float kth = kth_largest(logits, vocab, p.top_k, scratch);
    ids.clear();
    for (int64_t i = 0; i < vocab; ++i)
      if (logits[i] >= kth) ids.push_back(static_cast<int32_t>(i));
    n = ids.size();
  } else {
    n = static_cast<size_t>(vocab);
    ids.resize(n);
    std::iota(ids.begin(), ids.end(), 0);
  }
  sort_candidates(logits, n, scratch);
  std::vector<double>& prob = scratch.prob;
  prob.resize(n);
  const double mx = static_cast<double>(logits[ids[0]]) * inv_t;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    prob[i] = std::exp(static_cast<double>(logits[ids[i]]) * inv_t - mx);
    sum += prob[i];
  }
  for (size_t i = 0; i < n; ++i) prob[i] /= sum;
  if (p.top_p < 1.0f) {
    // Keep the smallest prefix whose mass reaches top_p (at least one token).
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += prob[i];
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  if (p.min_p > 0.0f) {
    const double threshold = prob[0] * p.min_p;
    size_t keep = 1;
    while (keep < n && prob[keep] >= threshold) ++keep;
    n = keep;
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += prob[i];
  double u = rng.uniform() * total;
  size_t chosen = n - 1;
  for (size_t i = 0; i < n; ++i) {
    u -= prob[i];
    if (u < 0) {
      chosen = i;
      break;
    }
  }
  out.id = ids[chosen];
  if (with_logprob) out.logprob = token_logprob(unprocessed, vocab, out.id);
  return out;
}

SampledToken sample_next(float* logits, int64_t vocab, const SamplingParams& p, const std::vector<int32_t>& context,
                         Rng& rng, bool with_logprob, size_t generated_begin) {
  SamplingScratch scratch;
  return sample_next(logits, vocab, p, std::span<const int32_t>(context), rng, with_logprob, generated_begin, scratch);
}

void ParallelSampler::run(std::span<SampleJob> jobs, int64_t vocab, ThreadPool& pool) {
  if (scratch_.size() < static_cast<size_t>(pool.num_threads())) scratch_.resize(static_cast<size_t>(pool.num_threads()));
  // Below ~64K logits in all a step's sampling is a few tens of µs: waking workers
  // would cost about as much as it saves.
  const int64_t n = static_cast<int64_t>(jobs.size());
  const int64_t grain = n * vocab >= (int64_t{1} << 16) ? 1 : n;
  struct Ctx {
    std::span<SampleJob> jobs;
    int64_t vocab;
    std::vector<SamplingScratch>* scratch;
  } ctx{jobs, vocab, &scratch_};
  // Captures one pointer: std::function keeps it inline, without allocating.
  pool.parallel_for(
      n,
      [c = &ctx](int64_t begin, int64_t end, int thread) {
        SamplingScratch& s = (*c->scratch)[static_cast<size_t>(thread)];
        for (int64_t i = begin; i < end; ++i) {
          SampleJob& j = c->jobs[static_cast<size_t>(i)];
          j.result = sample_next(j.logits, c->vocab, *j.params, j.context, *j.rng, j.with_logprob, j.generated_begin, s);
        }
      },
      grain);
}

}  // namespace loom::generation
