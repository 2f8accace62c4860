// vdpbf16ps tile for bf16 weights: x rounded to bf16 pairs, each instruction
// adds two products per output. Used under matmul precision "medium" (matmul.h)
// or with AVX512_BF16 forced. It is worth it where vdpbf16ps runs at vfmadd's
// instruction rate (AMD Zen 5: bf16 linear at M = 512, 2 threads, 955-1010 GFLOP/s
// against 426-453 widening to f32); on the Sapphire Rapids class Xeon measured it
// runs at a quarter of that rate, and widening (gemm_avx512.cc) is faster there.
#include "runtime/cpu/gemm_avx512_tile.h"

#if defined(LOOM_MATMUL_X86)

namespace loom::cpu::detail {
namespace {

constexpr int kNv = kNr / 16;

// MR rows × NP consecutive panels (TileArgs::panels; NP > 1 gives an M = 1 row
// 2·NP independent accumulation chains). kPrefetch > 0: the weights stream from
// memory and each pair step prefetches that many bytes ahead into L2; 0: they are
// in L2 or L1 already, and the tile instead pulls t.prefetch's lines (the next
// panel group or block) into L2, one per pair step.
template <int MR, int NP, int kPrefetch>
LOOM_TARGET_AVX512BF16 LOOM_INLINE void dot_tile(const TileArgs& t) {
  constexpr int NV = NP * kNv;
  __m512 acc[MR][NV];
  __mmask16 mask[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const int n = t.n_valid - 16 * v;
    mask[v] = n >= 16 ? 0xffff : (n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1));
  }
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      acc[m][v] = t.accumulate ? _mm512_maskz_loadu_ps(mask[v], t.c + m * t.ldc + 16 * v) : _mm512_setzero_ps();
    }
  }
  const uint32_t* a = static_cast<const uint32_t*>(t.a);  // bf16 pairs
  const int64_t lda = t.lda / 2;
  const uint16_t* b[NP];
#pragma GCC unroll 4
  for (int j = 0; j < NP; ++j) b[j] = static_cast<const uint16_t*>(t.b) + j * (t.panel_stride / 2);
  const int64_t pairs = (t.k + 1) / 2;  // the odd tail pairs a zero x with a zero weight
  for (int64_t p = 0; p < pairs; ++p) {
    if constexpr (kPrefetch > 0) {
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) {
        const char* next = reinterpret_cast<const char*>(b[j] + p * kNr * 2) + kPrefetch;
        _mm_prefetch(next, _MM_HINT_T1);
        _mm_prefetch(next + 64, _MM_HINT_T1);
      }
    } else {
      if (p < t.prefetch_lines) _mm_prefetch(static_cast<const char*>(t.prefetch) + 64 * p, _MM_HINT_T1);
    }
    __m512bh w[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) {
#pragma GCC unroll 8
      for (int v = 0; v < kNv; ++v) w[j * kNv + v] = (__m512bh)_mm512_load_si512(b[j] + (p * kNr + 16 * v) * 2);
    }
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[m * lda + p]));
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], x, w[v]);
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

// Not inlined: dispatch_stream (gemm_avx512_tile.h) is compiled for plain AVX-512 and
// calls it once per tile.
template <int MR, int NP>
LOOM_TARGET_AVX512BF16 void dot_tile_for(const TileArgs& t) {
  // Blocked tiles (their block was pulled into L2 during the previous one) and
  // streaming tiles whose group is already in L2 do not stream-prefetch.
  if (t.weights_in_l2) {
    dot_tile<MR, NP, 0>(t);
  } else {
    dot_tile<MR, NP, kStreamPrefetchBytes>(t);
  }
}

struct DotTile {
  const TileArgs& t;
  template <int MR, int NP>
  LOOM_TARGET_AVX512 LOOM_INLINE void run() const {
    dot_tile_for<MR, NP>(t);
  }
};

}  // namespace

// TileArgs::panels is 4 only for mr ≤ 3 and 2 only for mr ≤ 6 (stream_panels_avx512).
LOOM_TARGET_AVX512BF16 void bf16_dot_tile_avx512bf16(const TileArgs& t) { avx512::dispatch_stream(t, DotTile{t}); }

LOOM_TARGET_AVX512BF16 void round_to_bf16_avx512bf16(const float* src, int64_t n, int64_t n_padded, uint16_t* dst) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh r = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
    _mm512_storeu_si512(dst + i, (__m512i)r);
  }
  if (i < n) {
    const int rest = static_cast<int>(n - i);
    const __mmask16 lo = rest >= 16 ? 0xffff : static_cast<__mmask16>((1u << rest) - 1);
    const __mmask16 hi = rest <= 16 ? 0 : static_cast<__mmask16>((1u << (rest - 16)) - 1);
    const __m512bh r =
        _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + i + 16), _mm512_maskz_loadu_ps(lo, src + i));
    const __mmask32 keep = rest >= 32 ? 0xffffffffu : static_cast<__mmask32>((1ull << rest) - 1);
    _mm512_mask_storeu_epi16(dst + i, keep, (__m512i)r);
    i = n;
  }
  for (; i < n_padded; ++i) dst[i] = 0;
}

}  // namespace loom::cpu::detail

#endif  // LOOM_MATMUL_X86
