// Portable kernels: the fallback for CPUs without AVX2 and the bitwise reference
// the vector paths are tested against (std::fma gives the same single rounding
// as vfmadd, so the results match exactly).
#include <cmath>
#include <cstring>

#include "loom/core/dtype.h"
#include "runtime/cpu/matmul_kernels.h"

namespace loom::cpu::detail {
namespace {

// Weight (k, n) of a block as f32.
struct F32Weights {
  const float* b;
  float operator()(int64_t k, int n) const { return b[k * kNr + n]; }
};
struct Bf16PairWeights {
  const uint16_t* b;
  float operator()(int64_t k, int n) const { return bf16_to_f32(b[((k >> 1) * kNr + n) * 2 + (k & 1)]); }
};
struct F16Weights {
  const uint16_t* b;
  float operator()(int64_t k, int n) const { return f16_to_f32(b[k * kNr + n]); }
};

template <typename Weights>
void tile(const TileArgs& t, Weights w) {
  float acc[kMaxMr][kNr];
  const float* a = static_cast<const float*>(t.a);
  for (int m = 0; m < t.mr; ++m) {
    for (int n = 0; n < kNr; ++n) acc[m][n] = (t.accumulate && n < t.n_valid) ? t.c[m * t.ldc + n] : 0.0f;
  }
  for (int64_t k = 0; k < t.k; ++k) {
    float wk[kNr];
    for (int n = 0; n < kNr; ++n) wk[n] = w(k, n);
    for (int m = 0; m < t.mr; ++m) {
      const float x = a[m * t.lda + k];
      for (int n = 0; n < kNr; ++n) acc[m][n] = std::fma(x, wk[n], acc[m][n]);
    }
  }
  for (int m = 0; m < t.mr; ++m) {
    for (int n = 0; n < t.n_valid; ++n) t.c[m * t.ldc + n] = t.bias ? acc[m][n] + t.bias[n] : acc[m][n];
  }
}

}  // namespace

void f32_tile_scalar(const TileArgs& t) { tile(t, F32Weights{static_cast<const float*>(t.b)}); }
void bf16_tile_scalar(const TileArgs& t) { tile(t, Bf16PairWeights{static_cast<const uint16_t*>(t.b)}); }
void f16_tile_scalar(const TileArgs& t) { tile(t, F16Weights{static_cast<const uint16_t*>(t.b)}); }

void widen_bf16_scalar(const void* src, int64_t k, float* dst) {
  const Bf16PairWeights w{static_cast<const uint16_t*>(src)};
  for (int64_t i = 0; i < k; ++i) {
    for (int n = 0; n < kNr; ++n) dst[i * kNr + n] = w(i, n);
  }
}

void widen_f16_scalar(const void* src, int64_t k, float* dst) {
  const F16Weights w{static_cast<const uint16_t*>(src)};
  for (int64_t i = 0; i < k; ++i) {
    for (int n = 0; n < kNr; ++n) dst[i * kNr + n] = w(i, n);
  }
}

const KernelTable& kernels_scalar() {
  static const KernelTable table{"SCALAR",        4,
                                 f32_tile_scalar, bf16_tile_scalar,
                                 f16_tile_scalar, widen_bf16_scalar,
                                 widen_f16_scalar, nullptr};
  return table;
}

}  // namespace loom::cpu::detail
