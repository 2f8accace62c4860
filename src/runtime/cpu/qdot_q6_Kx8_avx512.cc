// Q6_K × int8 activations for up to kQTileRows rows (decode and small batches),
// AVX-512 (BW, VNNI), over weights interleaved in groups of 8 rows
// (qlayout_q6_Kx8.h): qdot_q6_Kx8_avx2.cc's steps with both runs of a pair in one
// zmm (qdot_x8_avx512.h), half the instructions per block, and vpdpwssd applying a
// sub-block's scales and adding in one step (non-saturating: the same exact int32
// sums). The integers and the f32 steps are the row kernels' (qdot_kernels.h), so
// results are bitwise theirs.
#include "runtime/cpu/matmul_kernels.h"
#if defined(LOOM_MATMUL_X86)
#include <immintrin.h>

#include "runtime/cpu/qdot_kernels.h"
#include "runtime/cpu/qdot_x8_avx512.h"
#include "runtime/cpu/qlayout_q6_Kx8.h"

namespace loom::cpu::detail {
namespace {

// How far ahead the group stream is prefetched: at batch 1 on 2 threads of a Zen 5
// (2048->8192 and 8192->2048, a plain read 58-62 GB/s), Q4_K 44-65 GB/s at 4 KB,
// 71-72 at 8 KB, 54-60 at 16 KB; Q6_K 62-68, 68-71, 69-70.
constexpr size_t kPrefetchBytes = 8192;

// [t]: from a scale pair's 16 bytes (row r's sub-block 2j + t at 2r + t) in every
// 128-bit lane, each row's scale in the high byte of its four int16 lanes: rows
// 0, 1, 4, 5 in the low 256 bits, 2, 3, 6, 7 in the high ones (as the run pair).
alignas(64) constexpr int8_t kSpreadScales[2][64] = {
#define LOOM_ROW(r, t) -1, 2 * (r) + (t), -1, 2 * (r) + (t), -1, 2 * (r) + (t), -1, 2 * (r) + (t)
    {LOOM_ROW(0, 0), LOOM_ROW(1, 0), LOOM_ROW(4, 0), LOOM_ROW(5, 0), LOOM_ROW(2, 0), LOOM_ROW(3, 0), LOOM_ROW(6, 0),
     LOOM_ROW(7, 0)},
    {LOOM_ROW(0, 1), LOOM_ROW(1, 1), LOOM_ROW(4, 1), LOOM_ROW(5, 1), LOOM_ROW(2, 1), LOOM_ROW(3, 1), LOOM_ROW(6, 1),
     LOOM_ROW(7, 1)},
#undef LOOM_ROW
};

// (nibble & 0x0F) | (tops & 0x30), the second half one ternary-logic op (0xF8: a | (b & c)).
LOOM_TARGET_X8_AVX512 LOOM_INLINE __m512i level_of(__m512i low4, __m512i bits45, __m512i nibble, __m512i tops) {
  return _mm512_ternarylogic_epi32(_mm512_and_si512(nibble, low4), tops, bits45, 0xF8);
}

template <int kRows>
LOOM_TARGET_X8_AVX512 void q6_Kx8_rows(const QdotArgs& a) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
  const __m512i spread[2] = {_mm512_load_si512(kSpreadScales[0]), _mm512_load_si512(kSpreadScales[1])};
  const size_t group_bytes = static_cast<size_t>(a.blocks) * kQ6_Kx8BlockBytes;
  const ActBlockQ8K* x[kRows];
  for (int r = 0; r < kRows; ++r) x[r] = qdot_act_row<ActBlockQ8K>(a, r);
  const char* ahead = reinterpret_cast<const char*>(a.w) + kPrefetchBytes;
  for (int64_t g = 0; g < a.outputs / kQ6_KGroupRows; ++g) {
    const uint8_t* w = a.w + group_bytes * static_cast<size_t>(g);
    __m256 acc[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.blocks; ++b) {
      const uint8_t* o = w + static_cast<size_t>(b) * kQ6_Kx8BlockBytes;
      if (a.stream) prefetch_group_stream<_MM_HINT_T1>(ahead, o, kQ6_Kx8BlockBytes, kPrefetchBytes);
      const uint8_t* scales = o + kQ6_Kx8ScalesOffset;
      __m512i isum[kRows];
      for (int r = 0; r < kRows; ++r) isum[r] = _mm512_setzero_si512();
      // Quarter h, pieces p = 2t, 2t + 1 of each 32-element run: sub-blocks 8h + 2k + t.
      for (int h = 0; h < 2; ++h) {
        for (int t = 0; t < 2; ++t) {
          __m512i level[4][2];
          for (int i = 0; i < 2; ++i) {
            const int p = 2 * t + i;
            const __m512i ql_a = load512(o + kQ6_Kx8QlOffset + 64 * (8 * h + p));
            const __m512i ql_b = load512(o + kQ6_Kx8QlOffset + 64 * (8 * h + 4 + p));
            const __m512i hb = load512(o + kQ6_Kx8QhOffset + 64 * (4 * h + p));
            // qh bits 2k, 2k + 1 to bits 4-5 by 16-bit shifts, as the AVX2 kernel's.
            level[0][i] = level_of(low4, bits45, ql_a, _mm512_slli_epi16(hb, 4));
            level[1][i] = level_of(low4, bits45, ql_b, _mm512_slli_epi16(hb, 2));
            level[2][i] = level_of(low4, bits45, _mm512_srli_epi16(ql_a, 4), hb);
            level[3][i] = level_of(low4, bits45, _mm512_srli_epi16(ql_b, 4), _mm512_srli_epi16(hb, 2));
          }
          __m512i sc[4];
          for (int k = 0; k < 4; ++k) {
            const __m512i pair =
                _mm512_maskz_broadcast_i32x4(0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * (4 * h + k))));
            sc[k] = _mm512_srai_epi16(_mm512_shuffle_epi8(pair, spread[t]), 8);
          }
          for (int r = 0; r < kRows; ++r) {
            const int8_t* xq = x[r][b].qs + 128 * h + 16 * t;
            for (int k = 0; k < 4; ++k) {
              const __m512i pairs = _mm512_add_epi16(_mm512_maddubs_epi16(level[k][0], bcast8_512(xq + 32 * k)),
                                                     _mm512_maddubs_epi16(level[k][1], bcast8_512(xq + 32 * k + 8)));
              isum[r] = _mm512_dpwssd_epi32(isum[r], pairs, sc[k]);
            }
          }
        }
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
      for (int r = 0; r < kRows; ++r) {
        __m256i offset = _mm256_setzero_si256();  // Σ_s sc_s·bsum_s per row (lane r)
        for (int j = 0; j < 8; ++j) {
          const __m256i pair = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * j)));
          offset = _mm256_dpwssd_epi32(offset, pair, bcast4(x[r][b].bsums + 2 * j));
        }
        const __m256i total = _mm256_sub_epi32(row_sums_x8(isum[r]), _mm256_slli_epi32(offset, 5));
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x[r][b].d)), _mm256_cvtepi32_ps(total), acc[r]);
      }
    }
    write_group_outputs<kRows>(a, g, acc);
  }
}

}  // namespace

LOOM_TARGET_X8_AVX512 void qdot_q6_Kx8_avx512(const QdotArgs& a) {
  LOOM_QDOT_X8_BY_ROWS(q6_Kx8_rows, a)
}

}  // namespace loom::cpu::detail
#endif
