// The cpu_simd kernels: f32 loops over 16 independent partial sums, which the
// compiler turns into vector code (this file is built with -O3). On x86-64 the
// hot loops are cloned for AVX-512, AVX2 and the baseline, and the loader
// picks the clone for the CPU it runs on (GCC target_clones); results differ
// from the reference only by f32 rounding order.
#include <cmath>

#include "kernels.h"

namespace lp {
namespace {

constexpr int kLanes = 16;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LP_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LP_VECTOR_CLONES
#endif

LP_VECTOR_CLONES float dot(const float* a, const float* b, int64_t d) {
  float part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= d; i += kLanes)
    for (int l = 0; l < kLanes; ++l) part[l] += a[i + l] * b[i + l];
  float s = 0;
  for (; i < d; ++i) s += a[i] * b[i];  // the tail
  for (int l = 0; l < kLanes; ++l) s += part[l];
  return s;
}

// Weight rows outer, input rows inner: one weight row is read once per chunk
// (from memory) and reused from cache by every row of the chunk.
LP_VECTOR_CLONES void linear(const float* x, int64_t m, int64_t k, const float* w, const float* b, int64_t n, float* y) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < m; ++r) y[r * n + j] = dot(x + r * k, w + j * k, k) + (b ? b[j] : 0.0f);
}

LP_VECTOR_CLONES float dot_bf16(const float* a, const uint16_t* b, int64_t d) {
  float part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= d; i += kLanes)
    for (int l = 0; l < kLanes; ++l) part[l] += a[i + l] * bf16_to_f32(b[i + l]);
  float s = 0;
  for (; i < d; ++i) s += a[i] * bf16_to_f32(b[i]);  // the tail
  for (int l = 0; l < kLanes; ++l) s += part[l];
  return s;
}

LP_VECTOR_CLONES void linear_bf16(const float* x, int64_t m, int64_t k, const uint16_t* w, const float* b, int64_t n, float* y) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < m; ++r) y[r * n + j] = dot_bf16(x + r * k, w + j * k, k) + (b ? b[j] : 0.0f);
}

void rms_norm(const float* x, int64_t groups, int64_t n, const float* w, float eps, float offset, float* out) {
  for (int64_t r = 0; r < groups; ++r) {
    const float* xr = x + r * n;
    const float inv = 1.0f / std::sqrt(dot(xr, xr, n) / static_cast<float>(n) + eps);
    float* o = out + r * n;
    for (int64_t i = 0; i < n; ++i) o[i] = xr[i] * inv * (offset + w[i]);
  }
}

void layer_norm(const float* x, int64_t rows, int64_t n, const float* w, const float* b, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float part[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int l = 0; l < kLanes; ++l) part[l] += xr[i + l];
    float sum = 0;
    for (; i < n; ++i) sum += xr[i];
    for (int l = 0; l < kLanes; ++l) sum += part[l];
    const float mean = sum / static_cast<float>(n);
    float var = 0;
    for (int64_t j = 0; j < n; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    const float rstd = 1.0f / std::sqrt(var / static_cast<float>(n) + eps);
    float* o = out + r * n;
    for (int64_t j = 0; j < n; ++j) o[j] = (xr[j] - mean) * rstd * w[j] + (b ? b[j] : 0.0f);
  }
}

LP_VECTOR_CLONES void axpy(float wt, const float* v, int64_t d, float* acc) {
  for (int64_t i = 0; i < d; ++i) acc[i] += wt * v[i];
}

}  // namespace

const Kernels& simd_kernels() {
  static const Kernels k{linear, linear_bf16, rms_norm, layer_norm, dot, axpy};
  return k;
}

}  // namespace lp
