// Scalar references for the element-wise routines: the textbook formulas in double.
#include <cmath>

#include "loom/runtime/cpu/elementwise.h"

namespace loom::cpu {

void add_ref(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_bias_ref(const float* x, const float* bias, int64_t rows, int64_t n, float* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) out[r * n + i] = x[r * n + i] + bias[i];
}

void mul_ref(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

void scale_ref(const float* x, float s, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * s;
}

void softcap_ref(const float* x, float cap, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(cap * std::tanh(static_cast<double>(x[i]) / cap));
}

float activation_ref(Activation act, float xf) {
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

void activation_ref(Activation act, const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = activation_ref(act, x[i]);
}

void gated_activation_ref(Activation act, const float* gate, int64_t gate_stride, const float* up,
                          int64_t up_stride, int64_t rows, int64_t n, float* out, int64_t out_stride) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i)
      out[r * out_stride + i] = static_cast<float>(static_cast<double>(activation_ref(act, gate[r * gate_stride + i])) *
                                                   up[r * up_stride + i]);
}

}  // namespace loom::cpu
