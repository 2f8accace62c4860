// The AVX2 tile body shared by gemm_avx2.cc and gemv_avx2.cc. With 16 ymm
// registers, up to 2 rows take the whole 32-wide panel in one pass (8
// accumulators: four independent FMA chains per row, which decode at M = 1 needs
// to keep up with memory); 3-6 rows do it as two 16-column passes (12
// accumulators), each re-reading the L1/L2-resident x rows and weight block.
#pragma once

#include "runtime/cpu/matmul_kernels.h"

#if defined(LOOM_MATMUL_X86)
#include <immintrin.h>

namespace loom::cpu::detail::avx2 {

constexpr int kMaxMr = 6;

// Columns per pass for MR rows.
constexpr int pass_columns(int mr) { return mr <= 2 ? 32 : 16; }

// Lane mask (all ones = keep) for columns [col, col + 8) below n_valid.
LOOM_TARGET_AVX2 LOOM_INLINE __m256i column_mask(int n_valid, int col) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n_valid - col), idx);
}

// Loader: load<V>(k, col, out) fills out[0..V) with the f32 weights of step k,
// columns [col, col + 8V); prefetch(k, bytes) as in the AVX-512 body.
template <int MR, int64_t kLda, int kPrefetch, typename Loader>
LOOM_TARGET_AVX2 LOOM_INLINE void tile_body(const TileArgs& t, const Loader& w) {
  constexpr int kCols = pass_columns(MR);
  constexpr int kV = kCols / 8;  // ymm per row per pass
  const float* a = static_cast<const float*>(t.a);
  const int64_t lda = kLda ? kLda : t.lda;
#pragma GCC unroll 2
  for (int col = 0; col < kNr; col += kCols) {
    if (t.n_valid <= col) break;
    float* c = t.c + col;
    __m256i mask[kV];
#pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) mask[v] = column_mask(t.n_valid, col + 8 * v);
    __m256 acc[MR][kV];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) {
        acc[m][v] = t.accumulate ? _mm256_maskload_ps(c + m * t.ldc + 8 * v, mask[v]) : _mm256_setzero_ps();
      }
    }
    for (int64_t k = 0; k < t.k; ++k) {
      if constexpr (kPrefetch > 0) {
        if (col == 0) w.prefetch(k, kPrefetch);
      } else {
        if (col == 0 && k < t.prefetch_lines) _mm_prefetch(static_cast<const char*>(t.prefetch) + 64 * k, _MM_HINT_T1);
        if (col == 0 && t.c_next && k >= 32 && k < 32 + 2 * t.c_next_rows) {
          _mm_prefetch(reinterpret_cast<const char*>(t.c_next + ((k - 32) >> 1) * t.ldc + (k & 1) * 16), _MM_HINT_T0);
        }
      }
      __m256 b[kV];
      w.template load<kV>(k, col, b);
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        const __m256 x = _mm256_broadcast_ss(a + m * lda + k);
#pragma GCC unroll 4
        for (int v = 0; v < kV; ++v) acc[m][v] = _mm256_fmadd_ps(x, b[v], acc[m][v]);
      }
    }
    if (t.bias) {
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) {
        const __m256 bias = _mm256_loadu_ps(t.bias + col + 8 * v);
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) acc[m][v] = _mm256_add_ps(acc[m][v], bias);
      }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) _mm256_maskstore_ps(c + m * t.ldc + 8 * v, mask[v], acc[m][v]);
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
