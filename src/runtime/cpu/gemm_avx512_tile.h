// The AVX-512 tile body shared by the f32 (gemm_avx512.cc) and widening
// (gemv_avx512.cc) kernels: MR rows × kNr columns in MR × kNr/16 zmm
// accumulators, x broadcast per row, weights supplied by a loader that yields
// f32 vectors for one or two k steps.
#pragma once

#include "runtime/cpu/matmul_kernels.h"

#if defined(LOOM_MATMUL_X86)
#include <immintrin.h>

namespace loom::cpu::detail::avx512 {

constexpr int kNv = kNr / 16;  // zmm per panel row

LOOM_TARGET_AVX512 LOOM_INLINE __mmask16 column_mask(int n_valid, int v) {
  const int n = n_valid - 16 * v;
  if (n >= 16) return 0xffff;
  if (n <= 0) return 0;
  return static_cast<__mmask16>((1u << n) - 1);
}

// Loader: kSteps k steps per load(); load(k, out) fills out[step][v] for steps
// k..k+kSteps-1; load_one(k, out) fills only step k (odd-k tail of pair loaders);
// panel(j) is the loader of the j-th panel after this one (TileArgs::panels).
// kPrefetch: bytes ahead of the weight stream to prefetch (0: none, for blocks
// already in L1).
template <int MR, int NP, int64_t kLda, int kPrefetch, typename Loader>
LOOM_TARGET_AVX512 LOOM_INLINE void tile_body(const TileArgs& t, const Loader& w0) {
  constexpr int NV = NP * kNv;  // zmm columns over all panels
  __m512 acc[MR][NV];
  __mmask16 mask[NV];
  Loader w[NP];
#pragma GCC unroll 4
  for (int j = 0; j < NP; ++j) w[j] = w0.panel(j, t.panel_stride);
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) mask[v] = column_mask(t.n_valid, v);
  if (t.accumulate) {
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_maskz_loadu_ps(mask[v], t.c + m * t.ldc + 16 * v);
    }
  } else {
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_setzero_ps();
    }
  }
  const float* a = static_cast<const float*>(t.a);
  const int64_t lda = kLda ? kLda : t.lda;
  constexpr int S = Loader::kSteps;
  int64_t k = 0;
  for (; k + S <= t.k; k += S) {
    if constexpr (kPrefetch > 0) {
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) w[j].prefetch(k, kPrefetch);
    } else {
      if (k / S < t.prefetch_lines) _mm_prefetch(static_cast<const char*>(t.prefetch) + 64 * (k / S), _MM_HINT_T1);
      // Two lines per row of the next C tile, after the block prefetch has started.
      if (t.c_next && k >= 32 && k < 32 + 2 * t.c_next_rows) {
        _mm_prefetch(reinterpret_cast<const char*>(t.c_next + ((k - 32) >> 1) * t.ldc + (k & 1) * 16), _MM_HINT_T0);
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) {
      __m512 b[S][kNv];
      w[j].load(k, b);
#pragma GCC unroll 2
      for (int s = 0; s < S; ++s) {
#pragma GCC unroll 16
        for (int m = 0; m < MR; ++m) {
          const __m512 x = _mm512_set1_ps(a[m * lda + k + s]);
#pragma GCC unroll 8
          for (int v = 0; v < kNv; ++v) acc[m][j * kNv + v] = _mm512_fmadd_ps(x, b[s][v], acc[m][j * kNv + v]);
        }
      }
    }
  }
  if constexpr (S == 2) {
    if (k < t.k) {
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) {
        __m512 b[kNv];
        w[j].load_one(k, b);
#pragma GCC unroll 16
        for (int m = 0; m < MR; ++m) {
          const __m512 x = _mm512_set1_ps(a[m * lda + k]);
#pragma GCC unroll 8
          for (int v = 0; v < kNv; ++v) acc[m][j * kNv + v] = _mm512_fmadd_ps(x, b[v], acc[m][j * kNv + v]);
        }
      }
    }
  }
  if (t.bias) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const __m512 bias = _mm512_loadu_ps(t.bias + 16 * v);
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) acc[m][v] = _mm512_add_ps(acc[m][v], bias);
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(t.c + m * t.ldc + 16 * v, mask[v], acc[m][v]);
  }
}

// Panels per streaming call for mr rows: up to 24 accumulators, the rest of the
// 32 zmm for weights, broadcasts and masks.
constexpr int stream_panels_for(int mr) { return mr <= 3 ? 4 : mr <= 6 ? 2 : 1; }

// Calls body.template run<MR>() for t.mr in 1..kMaxMr.
template <typename Body>
LOOM_TARGET_AVX512 LOOM_INLINE void dispatch_mr(int mr, const Body& body) {
  switch (mr) {
    case 1: body.template run<1>(); break;
    case 2: body.template run<2>(); break;
    case 3: body.template run<3>(); break;
    case 4: body.template run<4>(); break;
    case 5: body.template run<5>(); break;
    case 6: body.template run<6>(); break;
    case 7: body.template run<7>(); break;
    case 8: body.template run<8>(); break;
    case 9: body.template run<9>(); break;
    case 10: body.template run<10>(); break;
    case 11: body.template run<11>(); break;
    case 12: body.template run<12>(); break;
    default: __builtin_unreachable();
  }
}

// Calls body.template run<MR, NP>() for the streaming tiles: NP = t.panels, which
// the driver keeps ≤ stream_panels_for(t.mr).
template <typename Body>
LOOM_TARGET_AVX512 LOOM_INLINE void dispatch_stream(const TileArgs& t, const Body& body) {
  if (t.panels == 4) {
    switch (t.mr) {
      case 1: body.template run<1, 4>(); return;
      case 2: body.template run<2, 4>(); return;
      case 3: body.template run<3, 4>(); return;
      default: __builtin_unreachable();
    }
  }
  if (t.panels == 2) {
    switch (t.mr) {
      case 1: body.template run<1, 2>(); return;
      case 2: body.template run<2, 2>(); return;
      case 3: body.template run<3, 2>(); return;
      case 4: body.template run<4, 2>(); return;
      case 5: body.template run<5, 2>(); return;
      case 6: body.template run<6, 2>(); return;
      default: __builtin_unreachable();
    }
  }
  switch (t.mr) {
    case 1: body.template run<1, 1>(); break;
    case 2: body.template run<2, 1>(); break;
    case 3: body.template run<3, 1>(); break;
    case 4: body.template run<4, 1>(); break;
    case 5: body.template run<5, 1>(); break;
    case 6: body.template run<6, 1>(); break;
    case 7: body.template run<7, 1>(); break;
    case 8: body.template run<8, 1>(); break;
    case 9: body.template run<9, 1>(); break;
    case 10: body.template run<10, 1>(); break;
    case 11: body.template run<11, 1>(); break;
    case 12: body.template run<12, 1>(); break;
    default: __builtin_unreachable();
  }
}

}  // namespace loom::cpu::detail::avx512

#endif  // LOOM_MATMUL_X86
