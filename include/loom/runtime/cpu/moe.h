// A sparse mixture-of-experts block (Mixtral, Qwen2-MoE, Qwen3-MoE, gpt-oss's
// routing): router logits → softmax over all experts (f32) → the top-k experts
// of each token → optional renormalisation of their weights (or gpt-oss: the
// top-k logits, then a softmax over them) → each selected expert's gated MLP
// down(act(gate(x)) * up(x)) (gpt-oss: biases, a clamped SwiGLU) → the weighted
// sum, plus (Qwen2-MoE) a shared expert's output scaled by sigmoid(x · shared_gate).
//
// Expert weights are stacked as Transformers 5.x stores them after its
// MergeModulelist + Concatenate conversion: gate_up [E, 2I, H] (gate rows, then
// up rows) and down [E, H, I]. The optimized kernel groups the step's tokens by
// expert, so each expert's weights are read once per call however many tokens
// chose it, and runs the packed matmul (matmul.h) on each group.
//
// Numerics: each token's result depends on its own row only (the packed matmul
// is row-wise batch invariant and every token sums its experts in increasing
// expert order, as Transformers' index_add_ loop does), so batching never
// changes a token's output. Ties in the top-k pick the lower expert index.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "loom/core/status.h"
#include "loom/core/tensor.h"
#include "loom/core/thread_pool.h"
#include "loom/runtime/cpu/elementwise.h"
#include "loom/runtime/cpu/matmul.h"

namespace loom::cpu {

enum class MoeRouting {
  kSoftmaxTopK,  // softmax over every expert, then the top k (Mixtral, Qwen-MoE)
  kTopKSoftmax,  // the top k logits, then a softmax over those k (gpt-oss)
};

struct MoeParams {
  int64_t top_k = 2;
  bool norm_topk_prob = true;  // Mixtral always; Qwen2-MoE when config.norm_topk_prob (kSoftmaxTopK only)
  Activation activation = Activation::kSilu;
  MoeRouting routing = MoeRouting::kSoftmaxTopK;
  // > 0: gpt-oss's clamped SwiGLU instead of `activation`: g = min(gate, limit),
  // u = clamp(up, -limit, limit), act = (u + 1) · g · σ(alpha · g).
  float swiglu_limit = 0.0f;
  float swiglu_alpha = 1.702f;
};

// Optional biases (gpt-oss): router [E], gate_up [E, 2I], down [E, H]; F32|BF16|F16.
struct MoeBiases {
  const Tensor* router = nullptr;
  const Tensor* gate_up = nullptr;
  const Tensor* down = nullptr;
};

// Routes one token: the top_k largest of `logits` [num_experts] (descending;
// ties → lower index) into experts[0..top_k) and their weights: for
// kSoftmaxTopK the softmax probabilities over all experts (f32), renormalised
// to sum 1 when norm_topk_prob; for kTopKSoftmax a softmax over the k logits.
void moe_route(const float* logits, int64_t num_experts, const MoeParams& p, int32_t* experts, float* weights);

// The router and every expert packed once (at graph preparation).
class PackedMoe {
 public:
  // router [E, H] F32|BF16|F16 (llama.cpp never quantizes it either); gate_up
  // [E, 2I, H] and down [E, H, I] F32|BF16|F16 or a quantized block type (each
  // expert then runs the quantized matmul). shared_gate (optional) [1, H]. kInvalidArgument naming the tensor when a
  // shape does not fit.
  static Result<PackedMoe> pack(const Tensor& router, const Tensor& gate_up, const Tensor& down,
                                const Tensor* shared_gate = nullptr, const MoeBiases& biases = {});

  int64_t num_experts() const { return static_cast<int64_t>(gate_up_.size()); }
  int64_t hidden() const { return hidden_; }
  int64_t intermediate() const { return inter_; }
  bool has_shared_gate() const { return !shared_gate_.empty(); }

  const PackedLinear& router() const { return router_; }
  const PackedLinear& gate_up(int64_t e) const { return gate_up_[static_cast<size_t>(e)]; }
  const PackedLinear& down(int64_t e) const { return down_[static_cast<size_t>(e)]; }
  const std::vector<float>& shared_gate() const { return shared_gate_; }

 private:
  int64_t hidden_ = 0, inter_ = 0;
  PackedLinear router_;
  std::vector<PackedLinear> gate_up_, down_;
  std::vector<float> shared_gate_;  // [H] widened to f32
};

// y[T, H] = MoE(x[T, H]) (+ sigmoid(x · shared_gate) * shared[T, H] when `shared`
// is given; needs a PackedMoe with a shared gate). x, shared and y are dense f32
// rows; y must not alias x. T = 0 does nothing.
void moe(const float* x, int64_t T, const PackedMoe& w, const MoeParams& p, const float* shared, float* y,
         ThreadPool& pool = ThreadPool::global());

// Scalar reference straight from the unpacked tensors: one token at a time,
// every dot product accumulated in double. Same arguments as above, with
// shared_gate null when there is no shared expert. Throws loom::Error for
// shapes that do not fit.
void moe_ref(const float* x, int64_t T, const Tensor& router, const Tensor& gate_up, const Tensor& down,
             const MoeParams& p, const float* shared, const Tensor* shared_gate, float* y,
             const MoeBiases& biases = {});

// gpt-oss's clamped SwiGLU of one (gate, up) pair (MoeParams::swiglu_limit > 0).
inline float clamped_swiglu(float gate, float up, float limit, float alpha) {
  const float g = gate < limit ? gate : limit;
  const float u = up < -limit ? -limit : (up > limit ? limit : up);
  return (u + 1.0f) * g / (1.0f + std::exp(-alpha * g));
}

}  // namespace loom::cpu
