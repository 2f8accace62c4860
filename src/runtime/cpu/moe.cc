// The grouped MoE kernel: route every token, gather the tokens of each expert
// into one block, run that expert's gate_up and down projections once over the
// block (packed matmul), then combine each token's experts in expert order.
#include "loom/runtime/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace loom::cpu {

void moe_route(const float* logits, int64_t num_experts, const MoeParams& p, int32_t* experts, float* weights) {
  float m = logits[0];
  for (int64_t e = 1; e < num_experts; ++e) m = std::max(m, logits[e]);
  float sum = 0.0f;
  for (int64_t e = 0; e < num_experts; ++e) sum += std::exp(logits[e] - m);
  // Selection on the logits (softmax is monotonic); a strict > keeps the lower
  // index first among equal values.
  for (int64_t k = 0; k < p.top_k; ++k) {
    int32_t best = -1;
    for (int64_t e = 0; e < num_experts; ++e) {
      bool taken = false;
      for (int64_t j = 0; j < k; ++j) taken = taken || experts[j] == e;
      if (!taken && (best < 0 || logits[e] > logits[best])) best = static_cast<int32_t>(e);
    }
    experts[k] = best;
    weights[k] = std::exp(logits[best] - m) / sum;
  }
  if (p.routing == MoeRouting::kTopKSoftmax) {
    // A softmax over the chosen logits alone; experts[0] holds the largest.
    const float top = logits[experts[0]];
    float s = 0.0f;
    for (int64_t k = 0; k < p.top_k; ++k) s += weights[k] = std::exp(logits[experts[k]] - top);
    for (int64_t k = 0; k < p.top_k; ++k) weights[k] /= s;
    return;
  }
  if (p.norm_topk_prob) {
    float s = 0.0f;
    for (int64_t k = 0; k < p.top_k; ++k) s += weights[k];
    for (int64_t k = 0; k < p.top_k; ++k) weights[k] /= s;
  }
}

namespace {

// Experts may be quantized (a GGUF file's blocks, or quantized at load): each
// expert's slab is then packed as any quantized linear is.
Status expect_shape(const Tensor& t, const Shape& want, const char* what, bool quantized_ok = false) {
  if (!t.defined() || t.shape() != want || !(dtype_is_float(t.dtype()) || (quantized_ok && dtype_is_quantized(t.dtype()))))
    return invalid_argument(std::string("moe: ") + what + " must be a " + (quantized_ok ? "float or quantized " : "float ") +
                            shape_to_string(want) + " tensor, got " + (t.defined() ? t.describe() : std::string("undefined")));
  return Status::Ok();
}

}  // namespace

Result<PackedMoe> PackedMoe::pack(const Tensor& router, const Tensor& gate_up, const Tensor& down,
                                  const Tensor* shared_gate, const MoeBiases& biases) {
  if (router.rank() != 2 || gate_up.rank() != 3 || gate_up.dim(2) != router.dim(1) || gate_up.dim(1) % 2 != 0)
    return invalid_argument("moe: router [E, H] and gate_up [E, 2I, H] do not fit: " + router.describe() + ", " +
                            gate_up.describe());
  const int64_t e_count = router.dim(0), h = router.dim(1), inter = gate_up.dim(1) / 2;
  LOOM_RETURN_IF_ERROR(expect_shape(gate_up, {e_count, 2 * inter, h}, "gate_up", true));
  LOOM_RETURN_IF_ERROR(expect_shape(down, {e_count, h, inter}, "down", true));
  if (shared_gate) LOOM_RETURN_IF_ERROR(expect_shape(*shared_gate, {1, h}, "shared_gate"));
  if (biases.router) LOOM_RETURN_IF_ERROR(expect_shape(*biases.router, {e_count}, "router_bias"));
  if (biases.gate_up) LOOM_RETURN_IF_ERROR(expect_shape(*biases.gate_up, {e_count, 2 * inter}, "gate_up_bias"));
  if (biases.down) LOOM_RETURN_IF_ERROR(expect_shape(*biases.down, {e_count, h}, "down_bias"));
  PackedMoe m;
  m.hidden_ = h;
  m.inter_ = inter;
  LOOM_ASSIGN_OR_RETURN(m.router_, PackedLinear::pack(router, biases.router));
  for (int64_t e = 0; e < e_count; ++e) {
    // Each expert's bias row goes with its slab: the matmul adds it.
    const Tensor gu_bias = biases.gate_up ? biases.gate_up->slice_rows(e, e + 1).reshape({2 * inter}) : Tensor();
    const Tensor dn_bias = biases.down ? biases.down->slice_rows(e, e + 1).reshape({h}) : Tensor();
    LOOM_ASSIGN_OR_RETURN(PackedLinear gu, PackedLinear::pack(gate_up.slice_rows(e, e + 1).reshape({2 * inter, h}),
                                                              biases.gate_up ? &gu_bias : nullptr));
    LOOM_ASSIGN_OR_RETURN(PackedLinear dn, PackedLinear::pack(down.slice_rows(e, e + 1).reshape({h, inter}),
                                                              biases.down ? &dn_bias : nullptr));
    m.gate_up_.push_back(std::move(gu));
    m.down_.push_back(std::move(dn));
  }
  if (shared_gate) m.shared_gate_ = shared_gate->to_f32_vector();
  return m;
}

namespace {

// Per-thread buffers reused across calls (decode runs this once per layer per token).
struct MoeScratch {
  std::vector<float> logits, weights, xg, gu, act, yg, slot_out;
  std::vector<int32_t> experts, order, counts, offsets, slot_of;
};
thread_local MoeScratch t_moe;

}  // namespace

void moe(const float* x, int64_t T, const PackedMoe& w, const MoeParams& p, const float* shared, float* y,
         ThreadPool& pool) {
  if (T <= 0) return;
  const int64_t E = w.num_experts(), H = w.hidden(), I = w.intermediate(), K = p.top_k;
  if (K < 1 || K > E) throw Error(invalid_argument("moe: top_k " + std::to_string(K) + " outside [1, " + std::to_string(E) + "]"));
  if (shared && !w.has_shared_gate()) throw Error(invalid_argument("moe: a shared expert output needs a shared gate"));
  MoeScratch& s = t_moe;
  s.logits.resize(static_cast<size_t>(T * E));
  linear(x, T, H, w.router(), s.logits.data(), E, pool);

  s.experts.resize(static_cast<size_t>(T * K));
  s.weights.resize(static_cast<size_t>(T * K));
  s.counts.assign(static_cast<size_t>(E), 0);
  for (int64_t t = 0; t < T; ++t) {
    moe_route(s.logits.data() + t * E, E, p, s.experts.data() + t * K, s.weights.data() + t * K);
    for (int64_t k = 0; k < K; ++k) ++s.counts[static_cast<size_t>(s.experts[static_cast<size_t>(t * K + k)])];
  }
  // Counting sort of the (token, slot) pairs by expert: order[offsets[e] ..] are
  // the slots t*K+k routed to expert e, tokens ascending.
  s.offsets.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t e = 0; e < E; ++e) s.offsets[static_cast<size_t>(e + 1)] = s.offsets[static_cast<size_t>(e)] + s.counts[static_cast<size_t>(e)];
  s.order.resize(static_cast<size_t>(T * K));
  {
    std::vector<int32_t>& fill = s.slot_of;  // next free position per expert
    fill.assign(s.offsets.begin(), s.offsets.end() - 1);
    for (int64_t i = 0; i < T * K; ++i) s.order[static_cast<size_t>(fill[static_cast<size_t>(s.experts[static_cast<size_t>(i)])]++)] = static_cast<int32_t>(i);
  }

  // Each expert's block: gather, gate_up, act(gate) * up, down; results land in
  // slot_out[t*K + k] so the combine below can sum in expert order.
  s.slot_out.resize(static_cast<size_t>(T * K * H));
  for (int64_t e = 0; e < E; ++e) {
    const int64_t begin = s.offsets[static_cast<size_t>(e)], n = s.counts[static_cast<size_t>(e)];
    if (n == 0) continue;
    s.xg.resize(static_cast<size_t>(n * H));
    for (int64_t r = 0; r < n; ++r) {
      const int64_t t = s.order[static_cast<size_t>(begin + r)] / K;
      std::memcpy(s.xg.data() + r * H, x + t * H, static_cast<size_t>(H) * sizeof(float));
    }
    s.gu.resize(static_cast<size_t>(n * 2 * I));
    linear(s.xg.data(), n, H, w.gate_up(e), s.gu.data(), 2 * I, pool);
    s.act.resize(static_cast<size_t>(n * I));
    if (p.swiglu_limit > 0) {
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < I; ++j)
          s.act[static_cast<size_t>(r * I + j)] =
              clamped_swiglu(s.gu[static_cast<size_t>(r * 2 * I + j)], s.gu[static_cast<size_t>(r * 2 * I + I + j)],
                             p.swiglu_limit, p.swiglu_alpha);
    } else {
      gated_activation(p.activation, s.gu.data(), 2 * I, s.gu.data() + I, 2 * I, n, I, s.act.data(), I, pool);
    }
    s.yg.resize(static_cast<size_t>(n * H));
    linear(s.act.data(), n, I, w.down(e), s.yg.data(), H, pool);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t slot = s.order[static_cast<size_t>(begin + r)];
      std::memcpy(s.slot_out.data() + slot * H, s.yg.data() + r * H, static_cast<size_t>(H) * sizeof(float));
    }
  }

  const std::vector<float>& sg = w.shared_gate();
  pool.parallel_for(T, [&](int64_t b, int64_t e_end, int) {
    std::vector<int32_t> idx(static_cast<size_t>(K));
    for (int64_t t = b; t < e_end; ++t) {
      const int32_t* ex = s.experts.data() + t * K;
      for (int64_t k = 0; k < K; ++k) idx[static_cast<size_t>(k)] = static_cast<int32_t>(k);
      std::sort(idx.begin(), idx.end(), [ex](int32_t a, int32_t c) { return ex[a] < ex[c]; });
      float* out = y + t * H;
      std::memset(out, 0, static_cast<size_t>(H) * sizeof(float));
      for (int64_t j = 0; j < K; ++j) {
        const int64_t slot = t * K + idx[static_cast<size_t>(j)];
        const float wt = s.weights[static_cast<size_t>(slot)];
        const float* src = s.slot_out.data() + slot * H;
        for (int64_t i = 0; i < H; ++i) out[i] += wt * src[i];
      }
      if (shared) {
        float dot = 0.0f;
        for (int64_t i = 0; i < H; ++i) dot = std::fma(x[t * H + i], sg[static_cast<size_t>(i)], dot);
        const float g = 1.0f / (1.0f + std::exp(-dot));
        const float* sh = shared + t * H;
        for (int64_t i = 0; i < H; ++i) out[i] += g * sh[i];
      }
    }
  }, 8);
}

}  // namespace loom::cpu
