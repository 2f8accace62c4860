// Scalar references for the row normalizations: statistics in double, textbook formulas.
#include <cmath>

#include "loom/runtime/cpu/norm.h"

namespace loom::cpu {

void rmsnorm_ref(const float* x, int64_t x_stride, int64_t rows, int64_t n, const float* weight, float eps,
                 float weight_offset, float* out, int64_t out_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) {
      const double w = weight ? static_cast<double>(weight_offset) + weight[i] : 1.0;
      out[r * out_stride + i] = static_cast<float>(xr[i] * inv * w);
    }
  }
}

void add_rmsnorm_ref(const float* residual, const float* x, int64_t rows, int64_t n, const float* weight, float eps,
                     float weight_offset, float* sum, float* out) {
  for (int64_t i = 0; i < rows * n; ++i) sum[i] = residual[i] + x[i];
  rmsnorm_ref(sum, n, rows, n, weight, eps, weight_offset, out, n);
}

void layernorm_ref(const float* x, int64_t rows, int64_t n, const float* weight, const float* bias, float eps,
                   float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += xr[i];
    mean /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<double>(n);
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < n; ++i) {
      double y = (xr[i] - mean) * rstd;
      if (weight) y *= weight[i];
      if (bias) y += bias[i];
      out[r * n + i] = static_cast<float>(y);
    }
  }
}

}  // namespace loom::cpu
