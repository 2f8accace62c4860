// The moe kernels of loom_portable (see moe.h): the same arithmetic as loom's
// runtime/cpu/moe_ref.cc (reference) and runtime/cpu/moe.cc (grouped), written
// again here because the runtime links nothing of loom.
#include "moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace lp {

float activation(Activation act, float xf) {
  const double x = xf;
  switch (act) {
    case Activation::kSilu:
      return static_cast<float>(x / (1.0 + std::exp(-x)));
    case Activation::kGeluTanh: {
      const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
      return static_cast<float>(0.5 * x * (1.0 + std::tanh(u)));
    }
    case Activation::kGeluErf:
      return static_cast<float>(0.5 * x * std::erfc(-x / std::sqrt(2.0)));
  }
  return 0.0f;
}

void moe_reference(const float* x, int64_t T, const MoeWeights& w, const MoeParams& p, const float* shared, float* y) {
  const int64_t E = w.experts, H = w.hidden, I = w.inter, K = p.top_k;
  std::vector<double> logits(static_cast<size_t>(E)), h(static_cast<size_t>(I)), acc(static_cast<size_t>(H)),
      wt(static_cast<size_t>(K));
  std::vector<int64_t> idx(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * H;
    for (int64_t e = 0; e < E; ++e) {
      double d = 0;
      for (int64_t i = 0; i < H; ++i) d += static_cast<double>(xt[i]) * w.router.at(e * H + i);
      logits[static_cast<size_t>(e)] = d;
    }
    const double m = *std::max_element(logits.begin(), logits.end());
    double z = 0;
    for (double l : logits) z += std::exp(l - m);
    // The K largest, ties to the lower index.
    for (int64_t e = 0; e < E; ++e) idx[static_cast<size_t>(e)] = e;
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int64_t a, int64_t b) { return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]; });
    double wsum = 0;
    for (int64_t k = 0; k < K; ++k) {
      wt[static_cast<size_t>(k)] = std::exp(logits[static_cast<size_t>(idx[static_cast<size_t>(k)])] - m) / z;
      wsum += wt[static_cast<size_t>(k)];
    }
    if (p.norm_topk_prob)
      for (double& v : wt) v /= wsum;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = idx[static_cast<size_t>(k)];
      const Matrix gu = w.gate_up.rows_from(e * 2 * I, H), dn = w.down.rows_from(e * H, I);
      for (int64_t j = 0; j < I; ++j) {
        double g = 0, u = 0;
        for (int64_t i = 0; i < H; ++i) {
          g += static_cast<double>(xt[i]) * gu.at(j * H + i);
          u += static_cast<double>(xt[i]) * gu.at((I + j) * H + i);
        }
        h[static_cast<size_t>(j)] = activation(p.act, static_cast<float>(g)) * u;
      }
      for (int64_t o = 0; o < H; ++o) {
        double d = 0;
        for (int64_t j = 0; j < I; ++j) d += h[static_cast<size_t>(j)] * dn.at(o * I + j);
        acc[static_cast<size_t>(o)] += wt[static_cast<size_t>(k)] * d;
      }
    }
    if (shared) {
      double d = 0;
      for (int64_t i = 0; i < H; ++i) d += static_cast<double>(xt[i]) * w.shared_gate[i];
      const double g = 1.0 / (1.0 + std::exp(-d));
      for (int64_t o = 0; o < H; ++o) acc[static_cast<size_t>(o)] += g * shared[t * H + o];
    }
    for (int64_t o = 0; o < H; ++o) y[t * H + o] = static_cast<float>(acc[static_cast<size_t>(o)]);
  }
}

namespace {

void linear(const Kernels& k, const float* x, int64_t m, int64_t in, const Matrix& w, int64_t out, float* y) {
  if (w.f32) k.linear(x, m, in, w.f32, nullptr, out, y);
  else k.linear_bf16(x, m, in, w.bf16, nullptr, out, y);
}

// Buffers reused across calls (a decode step runs this once per layer).
struct Scratch {
  std::vector<float> logits, weights, xg, gu, act, yg, slot_out;
  std::vector<int32_t> experts, order, counts, offsets, fill;
};
thread_local Scratch t_scratch;

}  // namespace

void moe_grouped(const Kernels& kern, const float* x, int64_t T, const MoeWeights& w, const MoeParams& p, const float* shared,
                 float* y) {
  if (T <= 0) return;
  const int64_t E = w.experts, H = w.hidden, I = w.inter, K = p.top_k;
  Scratch& s = t_scratch;
  s.logits.resize(static_cast<size_t>(T * E));
  linear(kern, x, T, H, w.router, E, s.logits.data());
  // Routing in f32: softmax over every expert, the K largest logits (a strict >
  // keeps the lower index among equals), optionally renormalised.
  s.experts.resize(static_cast<size_t>(T * K));
  s.weights.resize(static_cast<size_t>(T * K));
  s.counts.assign(static_cast<size_t>(E), 0);
  for (int64_t t = 0; t < T; ++t) {
    const float* l = s.logits.data() + t * E;
    int32_t* ex = s.experts.data() + t * K;
    float* wt = s.weights.data() + t * K;
    float m = l[0];
    for (int64_t e = 1; e < E; ++e) m = std::max(m, l[e]);
    float sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) sum += std::exp(l[e] - m);
    for (int64_t k = 0; k < K; ++k) {
      int32_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int64_t j = 0; j < k; ++j) taken = taken || ex[j] == e;
        if (!taken && (best < 0 || l[e] > l[best])) best = static_cast<int32_t>(e);
      }
      ex[k] = best;
      wt[k] = std::exp(l[best] - m) / sum;
      ++s.counts[static_cast<size_t>(best)];
    }
    if (p.norm_topk_prob) {
      float ws = 0.0f;
      for (int64_t k = 0; k < K; ++k) ws += wt[k];
      for (int64_t k = 0; k < K; ++k) wt[k] /= ws;
    }
  }
  // The (token, slot) pairs sorted by expert: order[offsets[e] ..] are the
  // slots t·K + k routed to expert e, tokens ascending.
  s.offsets.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t e = 0; e < E; ++e) s.offsets[static_cast<size_t>(e + 1)] = s.offsets[static_cast<size_t>(e)] + s.counts[static_cast<size_t>(e)];
  s.order.resize(static_cast<size_t>(T * K));
  s.fill.assign(s.offsets.begin(), s.offsets.end() - 1);
  for (int64_t i = 0; i < T * K; ++i)
    s.order[static_cast<size_t>(s.fill[static_cast<size_t>(s.experts[static_cast<size_t>(i)])]++)] = static_cast<int32_t>(i);

  // Each used expert once: gather its tokens, gate_up, act(gate) · up, down,
  // results to slot_out[t·K + k].
  s.slot_out.resize(static_cast<size_t>(T * K * H));
  for (int64_t e = 0; e < E; ++e) {
    const int64_t begin = s.offsets[static_cast<size_t>(e)], n = s.counts[static_cast<size_t>(e)];
    if (n == 0) continue;
    s.xg.resize(static_cast<size_t>(n * H));
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(s.xg.data() + r * H, x + (s.order[static_cast<size_t>(begin + r)] / K) * H, static_cast<size_t>(H) * 4);
    s.gu.resize(static_cast<size_t>(n * 2 * I));
    linear(kern, s.xg.data(), n, H, w.gate_up.rows_from(e * 2 * I, H), 2 * I, s.gu.data());
    s.act.resize(static_cast<size_t>(n * I));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < I; ++j)
        s.act[static_cast<size_t>(r * I + j)] = activation(p.act, s.gu[static_cast<size_t>(r * 2 * I + j)]) * s.gu[static_cast<size_t>(r * 2 * I + I + j)];
    s.yg.resize(static_cast<size_t>(n * H));
    linear(kern, s.act.data(), n, I, w.down.rows_from(e * H, I), H, s.yg.data());
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(s.slot_out.data() + s.order[static_cast<size_t>(begin + r)] * H, s.yg.data() + r * H, static_cast<size_t>(H) * 4);
  }

  std::vector<int32_t> idx(static_cast<size_t>(K));
  for (int64_t t = 0; t < T; ++t) {
    const int32_t* ex = s.experts.data() + t * K;
    for (int64_t k = 0; k < K; ++k) idx[static_cast<size_t>(k)] = static_cast<int32_t>(k);
    std::sort(idx.begin(), idx.end(), [ex](int32_t a, int32_t c) { return ex[a] < ex[c]; });
    float* out = y + t * H;
    std::memset(out, 0, static_cast<size_t>(H) * 4);
    for (int64_t j = 0; j < K; ++j) {
      const int64_t slot = t * K + idx[static_cast<size_t>(j)];
      kern.axpy(s.weights[static_cast<size_t>(slot)], s.slot_out.data() + slot * H, H, out);
    }
    if (shared) {
      const float g = 1.0f / (1.0f + std::exp(-kern.dot(x + t * H, w.shared_gate, H)));
      kern.axpy(g, shared + t * H, H, out);
    }
  }
}

}  // namespace lp
