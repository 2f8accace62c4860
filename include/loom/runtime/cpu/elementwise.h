// Element-wise f32 routines of a transformer forward: residual adds, scaling, activations and
// the gated MLP activations (SwiGLU, GeGLU). `out` may alias an input (in-place use). Large
// calls are split across the pool; small ones run on the calling thread. Each routine has a
// scalar `_ref` twin, computed in double, that tests hold it against.
#pragma once

#include <cstdint>
#include <string_view>

#include "loom/core/status.h"
#include "loom/core/thread_pool.h"

namespace loom::cpu {

enum class Activation {
  kSilu,      // x * sigmoid(x)
  kGeluTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  kGeluErf,   // 0.5 x (1 + erf(x / sqrt(2)))
};

// Transformers' `hidden_act` names: "silu"/"swish" → kSilu; "gelu" → kGeluErf;
// "gelu_new", "gelu_pytorch_tanh", "gelu_fast" → kGeluTanh. Others: kUnsupported.
Result<Activation> activation_from_name(std::string_view hidden_act);
const char* activation_name(Activation act);

// out[i] = a[i] + b[i]
void add(const float* a, const float* b, int64_t n, float* out, ThreadPool& pool);
// out[r, i] = x[r, i] + bias[i] for r < rows (a linear layer's bias, rows contiguous).
void add_bias(const float* x, const float* bias, int64_t rows, int64_t n, float* out, ThreadPool& pool);
// out[i] = a[i] * b[i]
void mul(const float* a, const float* b, int64_t n, float* out, ThreadPool& pool);
// out[i] = x[i] * s
void scale(const float* x, float s, int64_t n, float* out, ThreadPool& pool);
// out[i] = cap * tanh(x[i] / cap), cap > 0 (Gemma 2's final-logit soft-capping)
void softcap(const float* x, float cap, int64_t n, float* out, ThreadPool& pool);
// out[i] = act(x[i])
void activation(Activation act, const float* x, int64_t n, float* out, ThreadPool& pool);
inline void silu(const float* x, int64_t n, float* out, ThreadPool& pool) {
  activation(Activation::kSilu, x, n, out, pool);
}
inline void gelu_tanh(const float* x, int64_t n, float* out, ThreadPool& pool) {
  activation(Activation::kGeluTanh, x, n, out, pool);
}
inline void gelu(const float* x, int64_t n, float* out, ThreadPool& pool) {
  activation(Activation::kGeluErf, x, n, out, pool);
}

// out[r, i] = act(gate[r, i]) * up[r, i] for r < rows, i < n. Rows are addressed through strides
// (elements), so one fused gate_up projection [rows, 2n] needs no copy: gate = gate_up,
// up = gate_up + n, both strides 2n. out may alias gate or up when the strides match.
void gated_activation(Activation act, const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                      int64_t rows, int64_t n, float* out, int64_t out_stride, ThreadPool& pool);
inline void silu_and_mul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, int64_t rows,
                         int64_t n, float* out, int64_t out_stride, ThreadPool& pool) {
  gated_activation(Activation::kSilu, gate, gate_stride, up, up_stride, rows, n, out, out_stride, pool);
}
inline void gelu_tanh_and_mul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                              int64_t rows, int64_t n, float* out, int64_t out_stride, ThreadPool& pool) {
  gated_activation(Activation::kGeluTanh, gate, gate_stride, up, up_stride, rows, n, out, out_stride, pool);
}
inline void gelu_and_mul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, int64_t rows,
                         int64_t n, float* out, int64_t out_stride, ThreadPool& pool) {
  gated_activation(Activation::kGeluErf, gate, gate_stride, up, up_stride, rows, n, out, out_stride, pool);
}

// Scalar references (single-threaded, transcendental functions in double).
void add_ref(const float* a, const float* b, int64_t n, float* out);
void add_bias_ref(const float* x, const float* bias, int64_t rows, int64_t n, float* out);
void mul_ref(const float* a, const float* b, int64_t n, float* out);
void scale_ref(const float* x, float s, int64_t n, float* out);
void softcap_ref(const float* x, float cap, int64_t n, float* out);
float activation_ref(Activation act, float x);
void activation_ref(Activation act, const float* x, int64_t n, float* out);
void gated_activation_ref(Activation act, const float* gate, int64_t gate_stride, const float* up,
                          int64_t up_stride, int64_t rows, int64_t n, float* out, int64_t out_stride);

}  // namespace loom::cpu
