// Reference MoE: one token at a time, the router, softmax and every expert
// projection in double straight from the stacked [E, …] tensors — no grouping,
// no packing — what the grouped kernel is tested against.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "loom/runtime/cpu/moe.h"

namespace loom::cpu {

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw Error(invalid_argument("moe_ref: " + what));
}

}  // namespace

void moe_ref(const float* x, int64_t T, const Tensor& router, const Tensor& gate_up, const Tensor& down,
             const MoeParams& p, const float* shared, const Tensor* shared_gate, float* y, const MoeBiases& biases) {
  check(router.defined() && router.rank() == 2, "router must be [E, H], got " + router.describe());
  const int64_t E = router.dim(0), H = router.dim(1);
  check(gate_up.defined() && gate_up.rank() == 3 && gate_up.dim(0) == E && gate_up.dim(2) == H && gate_up.dim(1) % 2 == 0,
        "gate_up must be [E, 2I, H], got " + gate_up.describe());
  const int64_t I = gate_up.dim(1) / 2;
  check(down.defined() && down.shape() == Shape{E, H, I}, "down must be [E, H, I], got " + down.describe());
  check(p.top_k >= 1 && p.top_k <= E, "top_k " + std::to_string(p.top_k) + " outside [1, E]");
  check(!shared || (shared_gate && shared_gate->shape() == Shape{1, H}), "a shared expert output needs a [1, H] gate");
  const std::vector<float> r = router.to_f32_vector(), gu = gate_up.to_f32_vector(), dn = down.to_f32_vector();
  const std::vector<float> sg = shared_gate ? shared_gate->to_f32_vector() : std::vector<float>();
  check(!biases.router || biases.router->shape() == Shape{E}, "router_bias must be [E]");
  check(!biases.gate_up || biases.gate_up->shape() == Shape{E, 2 * I}, "gate_up_bias must be [E, 2I]");
  check(!biases.down || biases.down->shape() == Shape{E, H}, "down_bias must be [E, H]");
  auto values = [](const Tensor* t, size_t n) { return t ? t->to_f32_vector() : std::vector<float>(n, 0.0f); };
  const std::vector<float> rb = values(biases.router, static_cast<size_t>(E)),
                           gub = values(biases.gate_up, static_cast<size_t>(E * 2 * I)),
                           db = values(biases.down, static_cast<size_t>(E * H));
  const int64_t K = p.top_k;
  std::vector<double> logits(static_cast<size_t>(E)), h(static_cast<size_t>(I)), acc(static_cast<size_t>(H));
  std::vector<int64_t> chosen;
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * H;
    for (int64_t e = 0; e < E; ++e) {
      double d = rb[static_cast<size_t>(e)];
      for (int64_t i = 0; i < H; ++i) d += static_cast<double>(xt[i]) * r[static_cast<size_t>(e * H + i)];
      logits[static_cast<size_t>(e)] = d;
    }
    const double m = *std::max_element(logits.begin(), logits.end());
    double z = 0;
    for (double l : logits) z += std::exp(l - m);
    // The K largest, ties to the lower index (stable sort of indices by logit).
    std::vector<int64_t> idx(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) idx[static_cast<size_t>(e)] = e;
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]; });
    chosen.assign(idx.begin(), idx.begin() + K);
    std::vector<double> wt(static_cast<size_t>(K));
    double wsum = 0;
    for (int64_t k = 0; k < K; ++k) {
      wt[static_cast<size_t>(k)] = std::exp(logits[static_cast<size_t>(chosen[static_cast<size_t>(k)])] - m) / z;
      wsum += wt[static_cast<size_t>(k)];
    }
    if (p.routing == MoeRouting::kTopKSoftmax) {
      // gpt-oss: a softmax over the chosen logits alone (chosen[0] is the largest).
      const double top = logits[static_cast<size_t>(chosen[0])];
      double zk = 0;
      for (int64_t k = 0; k < K; ++k) zk += wt[static_cast<size_t>(k)] = std::exp(logits[static_cast<size_t>(chosen[static_cast<size_t>(k)])] - top);
      for (double& v : wt) v /= zk;
    } else if (p.norm_topk_prob) {
      for (double& v : wt) v /= wsum;
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = chosen[static_cast<size_t>(k)];
      const float* g_rows = gu.data() + e * 2 * I * H;
      for (int64_t j = 0; j < I; ++j) {
        double g = gub[static_cast<size_t>(e * 2 * I + j)], u = gub[static_cast<size_t>(e * 2 * I + I + j)];
        for (int64_t i = 0; i < H; ++i) {
          g += static_cast<double>(xt[i]) * g_rows[j * H + i];
          u += static_cast<double>(xt[i]) * g_rows[(I + j) * H + i];
        }
        if (p.swiglu_limit > 0) {  // gpt-oss's clamped SwiGLU, in double
          const double l = p.swiglu_limit, gc = std::min(g, l), uc = std::clamp(u, -l, l);
          h[static_cast<size_t>(j)] = (uc + 1.0) * gc / (1.0 + std::exp(-static_cast<double>(p.swiglu_alpha) * gc));
        } else {
          h[static_cast<size_t>(j)] = activation_ref(p.activation, static_cast<float>(g)) * u;
        }
      }
      const float* d_rows = dn.data() + e * H * I;
      for (int64_t o = 0; o < H; ++o) {
        double d = db[static_cast<size_t>(e * H + o)];
        for (int64_t j = 0; j < I; ++j) d += h[static_cast<size_t>(j)] * d_rows[o * I + j];
        acc[static_cast<size_t>(o)] += wt[static_cast<size_t>(k)] * d;
      }
    }
    if (shared) {
      double d = 0;
      for (int64_t i = 0; i < H; ++i) d += static_cast<double>(xt[i]) * sg[static_cast<size_t>(i)];
      const double g = 1.0 / (1.0 + std::exp(-d));
      for (int64_t o = 0; o < H; ++o) acc[static_cast<size_t>(o)] += g * shared[t * H + o];
    }
    for (int64_t o = 0; o < H; ++o) y[t * H + o] = static_cast<float>(acc[static_cast<size_t>(o)]);
  }
}

}  // namespace loom::cpu
