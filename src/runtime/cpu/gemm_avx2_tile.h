// The AVX2 tile body shared by gemm_avx2.cc and gemv_avx2.cc. 16 ymm registers
// fit 6 rows × 16 columns (12 accumulators), so a 32-wide panel is done as two
// 16-column halves, each re-reading the (L1-resident) x rows.
#pragma once

#include "runtime/cpu/matmul_kernels.h"

#if defined(LOOM_MATMUL_X86)
#include <immintrin.h>

namespace loom::cpu::detail::avx2 {

constexpr int kMaxMr = 6;
constexpr int kHalf = 16;  // columns per pass
constexpr int kHalves = kNr / kHalf;

// Lane mask (all ones = keep) for columns [col, col + 8) below n_valid.
LOOM_TARGET_AVX2 LOOM_INLINE __m256i column_mask(int n_valid, int col) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n_valid - col), idx);
}

// Loader: load(k, h, out) fills out[0..1] with the f32 weights of step k,
// columns [16h, 16h + 16); prefetch(k, bytes) as in the AVX-512 body.
template <int MR, int64_t kLda, int kPrefetch, typename Loader>
LOOM_TARGET_AVX2 LOOM_INLINE void tile_body(const TileArgs& t, const Loader& w) {
  const float* a = static_cast<const float*>(t.a);
  const int64_t lda = kLda ? kLda : t.lda;
#pragma GCC unroll 2
  for (int h = 0; h < kHalves; ++h) {
    if (t.n_valid <= h * kHalf) break;
    float* c = t.c + h * kHalf;
    const __m256i mask0 = column_mask(t.n_valid, h * kHalf);
    const __m256i mask1 = column_mask(t.n_valid, h * kHalf + 8);
    __m256 acc[MR][2];
    if (t.accumulate) {
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        acc[m][0] = _mm256_maskload_ps(c + m * t.ldc, mask0);
        acc[m][1] = _mm256_maskload_ps(c + m * t.ldc + 8, mask1);
      }
    } else {
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < t.k; ++k) {
      if constexpr (kPrefetch > 0) {
        if (h == 0) w.prefetch(k, kPrefetch);
      } else {
        if (h == 0 && k < t.prefetch_lines) _mm_prefetch(static_cast<const char*>(t.prefetch) + 64 * k, _MM_HINT_T1);
      }
      __m256 b[2];
      w.load(k, h, b);
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        const __m256 x = _mm256_broadcast_ss(a + m * lda + k);
        acc[m][0] = _mm256_fmadd_ps(x, b[0], acc[m][0]);
        acc[m][1] = _mm256_fmadd_ps(x, b[1], acc[m][1]);
      }
    }
    if (t.bias) {
      const __m256 b0 = _mm256_loadu_ps(t.bias + h * kHalf), b1 = _mm256_loadu_ps(t.bias + h * kHalf + 8);
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        acc[m][0] = _mm256_add_ps(acc[m][0], b0);
        acc[m][1] = _mm256_add_ps(acc[m][1], b1);
      }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      _mm256_maskstore_ps(c + m * t.ldc, mask0, acc[m][0]);
      _mm256_maskstore_ps(c + m * t.ldc + 8, mask1, acc[m][1]);
    }
  }
}

template <typename Body>
LOOM_TARGET_AVX2 LOOM_INLINE void dispatch_mr(int mr, const Body& body) {
  switch (mr) {
    case 1: body.template run<1>(); break;
    case 2: body.template run<2>(); break;
    case 3: body.template run<3>(); break;
    case 4: body.template run<4>(); break;
    case 5: body.template run<5>(); break;
    case 6: body.template run<6>(); break;
    default: __builtin_unreachable();
  }
}

}  // namespace loom::cpu::detail::avx2

#endif  // LOOM_MATMUL_X86
