// Scalar kernels, as loom's reference backend computes them (double sums).
#include <cmath>

#include "kernels.h"

namespace lp {
namespace {

void linear(const float* x, int64_t m, int64_t k, const float* w, const float* b, int64_t n, float* y) {
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t i = 0; i < k; ++i) acc += static_cast<double>(x[r * k + i]) * w[j * k + i];
      if (b) acc += b[j];
      y[r * n + j] = static_cast<float>(acc);
    }
}

void linear_bf16(const float* x, int64_t m, int64_t k, const uint16_t* w, const float* b, int64_t n, float* y) {
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t i = 0; i < k; ++i) acc += static_cast<double>(x[r * k + i]) * bf16_to_f32(w[j * k + i]);
      if (b) acc += b[j];
      y[r * n + j] = static_cast<float>(acc);
    }
}

void rms_norm(const float* x, int64_t groups, int64_t n, const float* w, float eps, float offset, float* out) {
  for (int64_t r = 0; r < groups; ++r) {
    const float* xr = x + r * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) out[r * n + i] = static_cast<float>(xr[i] * inv * (static_cast<double>(offset) + w[i]));
  }
}

void layer_norm(const float* x, int64_t rows, int64_t n, const float* w, const float* b, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += xr[i];
    mean /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<double>(n);
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < n; ++i) {
      double y = (xr[i] - mean) * rstd * w[i];
      if (b) y += b[i];
      out[r * n + i] = static_cast<float>(y);
    }
  }
}

float dot(const float* a, const float* b, int64_t d) {
  double s = 0;
  for (int64_t i = 0; i < d; ++i) s += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(s);
}

void axpy(float w, const float* v, int64_t d, float* acc) {
  for (int64_t i = 0; i < d; ++i) acc[i] += w * v[i];
}

}  // namespace

const Kernels& reference_kernels() {
  static const Kernels k{linear, linear_bf16, rms_norm, layer_norm, dot, axpy};
  return k;
}

}  // namespace lp
