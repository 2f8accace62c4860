#include "runtime/cpu/pack_panel_words.h"

#include "runtime/cpu/matmul_kernels.h"

#if defined(LOOM_MATMUL_X86)
#include <immintrin.h>

namespace loom::cpu::detail {
namespace {

// r[i] = 16 words of row i in; out[w] = word w of the 16 rows.
LOOM_TARGET_AVX512 LOOM_INLINE void transpose_16x16(__m512i (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // r[4g + c], 128-bit lane L: word 4L + c of rows 4g..4g+3.
  for (int g = 0; g < 4; ++g) {
    r[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g + 0], t[4 * g + 2]);
    r[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g + 0], t[4 * g + 2]);
    r[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    r[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  // Gather lane L of r[c], r[4 + c], r[8 + c], r[12 + c] into word 4L + c.
  for (int c = 0; c < 4; ++c) {
    const __m512i even_a = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88);  // lanes 0, 2
    const __m512i even_b = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88);
    const __m512i odd_a = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd);  // lanes 1, 3
    const __m512i odd_b = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
    t[0 + c] = _mm512_shuffle_i32x4(even_a, even_b, 0x88);
    t[8 + c] = _mm512_shuffle_i32x4(even_a, even_b, 0xdd);
    t[4 + c] = _mm512_shuffle_i32x4(odd_a, odd_b, 0x88);
    t[12 + c] = _mm512_shuffle_i32x4(odd_a, odd_b, 0xdd);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

}  // namespace

LOOM_TARGET_AVX512 void transpose_panel_words_avx512(const uint32_t* src, int64_t words, uint32_t* dst) {
  static_assert(kNr == 32, "two 16-row halves a panel");
  const int64_t whole = words / 16 * 16;
  for (int64_t w0 = 0; w0 < whole; w0 += 16) {
    for (int half = 0; half < 2; ++half) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + (16 * half + i) * words + w0);
      transpose_16x16(r);
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(dst + (w0 + i) * kNr + 16 * half, r[i]);
    }
  }
  for (int64_t j = 0; j < kNr; ++j) {
    for (int64_t w = whole; w < words; ++w) dst[w * kNr + j] = src[j * words + w];
  }
}

}  // namespace loom::cpu::detail

#endif  // LOOM_MATMUL_X86
