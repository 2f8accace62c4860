// vdpbf16ps tile for bf16 weights: x rounded to bf16 pairs, each instruction
// adds two products per output. Only used when AVX512_BF16 is forced: on the
// Xeon measured it runs at a quarter of vfmadd's instruction rate, so widening
// to f32 (gemm_avx512.cc / gemv_avx512.cc) is faster as well as more exact.
#include "runtime/cpu/gemm_avx512_tile.h"

#if defined(LOOM_MATMUL_X86)

namespace loom::cpu::detail {
namespace {

constexpr int kNv = kNr / 16;

template <int MR>
LOOM_TARGET_AVX512BF16 LOOM_INLINE void dot_tile(const TileArgs& t) {
  __m512 acc[MR][kNv];
  __mmask16 mask[kNv];
#pragma GCC unroll 8
  for (int v = 0; v < kNv; ++v) {
    const int n = t.n_valid - 16 * v;
    mask[v] = n >= 16 ? 0xffff : (n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1));
  }
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) {
      acc[m][v] = t.accumulate ? _mm512_maskz_loadu_ps(mask[v], t.c + m * t.ldc + 16 * v) : _mm512_setzero_ps();
    }
  }
  const uint32_t* a = static_cast<const uint32_t*>(t.a);  // bf16 pairs
  const int64_t lda = t.lda / 2;
  const uint16_t* b = static_cast<const uint16_t*>(t.b);
  const int64_t pairs = (t.k + 1) / 2;  // the odd tail pairs a zero x with a zero weight
  for (int64_t p = 0; p < pairs; ++p) {
    _mm_prefetch(reinterpret_cast<const char*>(b + p * kNr * 2) + kStreamPrefetchBytes, _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char*>(b + p * kNr * 2) + kStreamPrefetchBytes + 64, _MM_HINT_T1);
    __m512bh w[kNv];
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) w[v] = (__m512bh)_mm512_load_si512(b + (p * kNr + 16 * v) * 2);
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[m * lda + p]));
#pragma GCC unroll 8
      for (int v = 0; v < kNv; ++v) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], x, w[v]);
    }
  }
  if (t.bias) {
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) {
      const __m512 bias = _mm512_loadu_ps(t.bias + 16 * v);
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) acc[m][v] = _mm512_add_ps(acc[m][v], bias);
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) _mm512_mask_storeu_ps(t.c + m * t.ldc + 16 * v, mask[v], acc[m][v]);
  }
}

}  // namespace

LOOM_TARGET_AVX512BF16 void bf16_dot_tile_avx512bf16(const TileArgs& t) {
  switch (t.mr) {
    case 1: dot_tile<1>(t); break;
    case 2: dot_tile<2>(t); break;
    case 3: dot_tile<3>(t); break;
    case 4: dot_tile<4>(t); break;
    case 5: dot_tile<5>(t); break;
    case 6: dot_tile<6>(t); break;
    case 7: dot_tile<7>(t); break;
    case 8: dot_tile<8>(t); break;
    case 9: dot_tile<9>(t); break;
    case 10: dot_tile<10>(t); break;
    case 11: dot_tile<11>(t); break;
    case 12: dot_tile<12>(t); break;
    default: __builtin_unreachable();
  }
}

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
