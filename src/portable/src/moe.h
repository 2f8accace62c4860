// The routed-experts block (loom's op `moe`: Mixtral, Qwen2-MoE) in the two
// kernel flavours of the runtime. `reference` follows loom's moe_ref: one
// token at a time, router, softmax and every projection in double straight
// from the stacked weights. `grouped` follows loom's optimized kernel: f32
// router logits and routing, the tokens of each expert gathered into one block
// that runs the backend's linear over that expert's weights (each expert's
// weights read once per chunk), each token's experts summed in expert order.
#pragma once

#include <cstdint>

#include "kernels.h"

namespace lp {

enum class Activation { kSilu, kGeluErf, kGeluTanh };

// act(x) in double, rounded to f32 (loom's activation_ref).
float activation(Activation act, float x);

// A weight matrix, f32 or bf16 (exactly one is set; bf16 is widened as read).
struct Matrix {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  Matrix rows_from(int64_t row, int64_t cols) const {
    return f32 ? Matrix{f32 + row * cols, nullptr} : Matrix{nullptr, bf16 + row * cols};
  }
  float at(int64_t i) const { return f32 ? f32[i] : bf16_to_f32(bf16[i]); }
};

struct MoeWeights {
  int64_t experts = 0, hidden = 0, inter = 0;  // E, H, I
  Matrix router;                     // [E, H]
  Matrix gate_up;                    // [E·2I, H]: expert e's I gate rows, then its I up rows
  Matrix down;                       // [E·H, I]
  const float* shared_gate = nullptr;  // [H], with a shared expert
};

struct MoeParams {
  int64_t top_k = 1;
  bool norm_topk_prob = true;
  Activation act = Activation::kSilu;
};

// y[T, H] = MoE(x[T, H]) (+ sigmoid(x · shared_gate) · shared[T, H] when shared
// is not null). y must not alias x or shared. Callers check the shapes.
void moe_reference(const float* x, int64_t T, const MoeWeights& w, const MoeParams& p, const float* shared, float* y);
void moe_grouped(const Kernels& k, const float* x, int64_t T, const MoeWeights& w, const MoeParams& p, const float* shared,
                 float* y);

}  // namespace lp
