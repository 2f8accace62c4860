#include "loom/generation/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
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

void apply_repetition_penalty(float* logits, int64_t vocab, const std::vector<int32_t>& context, float penalty) {
  if (penalty == 1.0f) return;
  // Each distinct token is penalised once, however often it occurs.
  std::vector<int32_t> ids(context);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) continue;
    float& l = logits[id];
    l = l < 0 ? l * penalty : l / penalty;
  }
}

void apply_presence_frequency_penalties(float* logits, int64_t vocab, const std::vector<int32_t>& context,
                                        size_t generated_begin, float presence, float frequency) {
  if ((presence == 0.0f && frequency == 0.0f) || generated_begin >= context.size()) return;
  std::vector<int32_t> ids(context.begin() + static_cast<std::ptrdiff_t>(generated_begin), context.end());
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j < ids.size() && ids[j] == ids[i]) ++j;
    if (ids[i] >= 0 && ids[i] < vocab) logits[ids[i]] -= presence + frequency * static_cast<float>(j - i);
    i = j;
  }
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
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  for (int32_t i = 0; i < k; ++i) out.push_back({idx[static_cast<size_t>(i)], logits[idx[static_cast<size_t>(i)]] - lse});
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
  std::vector<float> kept;
  kept.reserve(also_allowed.size());
  for (int32_t id : also_allowed) kept.push_back(id >= 0 && id < vocab ? logits[id] : kNegInf);
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

SampledToken sample_next(float* logits, int64_t vocab, const SamplingParams& p, const std::vector<int32_t>& context,
                         Rng& rng, bool with_logprob, size_t generated_begin) {
  // The logprob reported is that of the raw model distribution, as the OpenAI API does:
  // a copy is kept only when a bias or penalty is about to change the logits.
  std::vector<float> raw;
  const bool modified = !p.logit_bias.empty() || (p.penalizes() && !context.empty());
  if (with_logprob && modified) raw.assign(logits, logits + vocab);
  const float* unprocessed = raw.empty() ? logits : raw.data();
  for (const auto& [id, bias] : p.logit_bias)
    if (id >= 0 && id < vocab) logits[id] += bias;
  apply_repetition_penalty(logits, vocab, context, p.repetition_penalty);
  apply_presence_frequency_penalties(logits, vocab, context, generated_begin, p.presence_penalty, p.frequency_penalty);
  SampledToken out;
  if (p.greedy()) {
    out.id = argmax(logits, vocab);
    if (with_logprob) out.logprob = token_logprob(unprocessed, vocab, out.id);
    return out;
  }
  const float inv_t = 1.0f / p.temperature;
  // Candidates sorted by descending logit; top-k trims before the sort.
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  size_t n = idx.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    // Ties at the k-th value are kept, as Transformers' TopKLogitsWarper does.
    std::nth_element(idx.begin(), idx.begin() + p.top_k - 1, idx.end(), by_logit);
    const float kth = logits[idx[static_cast<size_t>(p.top_k - 1)]];
    size_t kept = 0;
    for (size_t i = 0; i < idx.size(); ++i)
      if (logits[idx[i]] >= kth) idx[kept++] = idx[i];
    n = kept;
  }
  std::sort(idx.begin(), idx.begin() + static_cast<long>(n), by_logit);
  std::vector<double> prob(n);
  const double mx = static_cast<double>(logits[idx[0]]) * inv_t;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    prob[i] = std::exp(static_cast<double>(logits[idx[i]]) * inv_t - mx);
    sum += prob[i];
  }
  for (auto& q : prob) q /= sum;
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
  out.id = idx[chosen];
  if (with_logprob) out.logprob = token_logprob(unprocessed, vocab, out.id);
  return out;
}

}  // namespace loom::generation
