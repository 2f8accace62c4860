// The body of the Q4_Kx8 and Q5_Kx8 AVX2 decode kernels (qdot_q4_Kx8_avx2.cc,
// qdot_q5_Kx8_avx2.cc): Q4_K × int8 activations for up to kQTileRows rows (decode and
// small batches), AVX2 (maddubs), over weights interleaved in groups of 8 rows
// (qlayout_q4_Kx8.h). Per group block the 8 rows' scales and mins are unpacked
// at once, and per chunk and run set the levels once; per activation row, four
// maddubs of a sub-block add up in int16 (each ≤ 2·31·127, four ≤ 31496 even with
// Q5_K's fifth bit) and one madd with the sub-block's scales, spread to their rows'
// lanes, widens them to int32; one hadd of the two run sets gives rows 0..7 in order.
// The min term is four madds of the rows' mins, paired by sub-block, with the
// activation block's sub-block sums. The integers and the f32 steps are the row
// kernels' (qdot_kernels.h), so results are bitwise theirs. Q5_K (qlayout_q5_Kx8.h)
// differs only in its levels' fifth bit: half of a stored 64-bit mask a vector,
// spread to bytes (broadcast, shuffle, and, compare) and or-ed in as 16.
#pragma once

#include "runtime/cpu/matmul_kernels.h"
#if defined(LOOM_MATMUL_X86)
#include <immintrin.h>

#include <cstring>

#include "runtime/cpu/qdot_kernels.h"
#include "runtime/cpu/qdot_x8_avx2.h"
#include "runtime/cpu/qlayout_q4_Kx8.h"
#include "runtime/cpu/qlayout_q5_Kx8.h"

namespace loom::cpu::detail {
namespace {

// How far ahead the group stream is prefetched. 2048→8192 and 8192→2048 at batch
// 1 on 2 threads of a Zen 3, medians of 3 (plain read 29-36 GB/s, noisy): 1152 B
// 28 GB/s, 2 KB 29-31, 4 KB 34-35.
constexpr size_t kPrefetchBytes = 4096;

// Per run set (rows 0, 1, 4, 5 or 2, 3, 6, 7): a sub-block's scale bytes of rows
// 0..7, broadcast, → each row's scale in its four int16 lanes.
alignas(32) constexpr int8_t kSpreadScales[2][32] = {
#define LOOM_ROW(r) r, -1, r, -1, r, -1, r, -1
    {LOOM_ROW(0), LOOM_ROW(1), LOOM_ROW(4), LOOM_ROW(5)},
    {LOOM_ROW(2), LOOM_ROW(3), LOOM_ROW(6), LOOM_ROW(7)},
#undef LOOM_ROW
};

// kQ5: Q5_Kx8 group blocks, else Q4_Kx8.
template <bool kQ5, int kRows>
LOOM_TARGET_AVX2 void k4x8_rows_avx2(const QdotArgs& a) {
  constexpr size_t kBlockBytes = kQ5 ? kQ5_Kx8BlockBytes : kQ4_Kx8BlockBytes;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i spread0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(kSpreadScales[0]));
  const __m256i spread1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(kSpreadScales[1]));
  const size_t group_bytes = static_cast<size_t>(a.blocks) * kBlockBytes;
  const ActBlockQ8K* x[kRows];
  const int16_t* sub_sums[kRows];
  for (int r = 0; r < kRows; ++r) {
    x[r] = qdot_act_row<ActBlockQ8K>(a, r);
    sub_sums[r] = a.act_sub_sums + static_cast<size_t>(r) * static_cast<size_t>(a.blocks) * 8;
  }
  const char* ahead = reinterpret_cast<const char*>(a.w) + kPrefetchBytes;
  for (int64_t g = 0; g < a.outputs / kQ4_KGroupRows; ++g) {
    const uint8_t* w = a.w + group_bytes * static_cast<size_t>(g);
    __m256 acc[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.blocks; ++b) {
      const uint8_t* o = w + static_cast<size_t>(b) * kBlockBytes;
      if (a.stream) prefetch_group_stream(ahead, o, kBlockBytes, kPrefetchBytes);
      alignas(32) uint8_t scales[64];
      __m256i m[4];  // mins of sub-blocks (0, 1), (2, 3), (4, 5), (6, 7)
      q4_Kx8_scales_mins(o, scales, m);

      __m256i isum[2][kRows];
      for (int set = 0; set < 2; ++set) {
        const __m256i spread = set == 0 ? spread0 : spread1;
        for (int r = 0; r < kRows; ++r) isum[set][r] = _mm256_setzero_si256();
        for (int c = 0; c < 4; ++c) {
          const uint8_t* run = o + kQ4_Kx8QsOffset + 256 * c + 32 * set;
          __m256i lo[4], hi[4];
          for (int h = 0; h < 4; ++h) {
            const __m256i v = load256(run + 64 * h);
            lo[h] = _mm256_and_si256(v, low4);
            hi[h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            if constexpr (kQ5) {
              // This run set's half of the piece's 64-bit masks.
              uint32_t m_lo, m_hi;
              std::memcpy(&m_lo, o + q5_Kx8_mask_offset(c, h, 0) + 4 * set, 4);
              std::memcpy(&m_hi, o + q5_Kx8_mask_offset(c, h, 1) + 4 * set, 4);
              lo[h] = _mm256_or_si256(lo[h], sixteen_where_bits(m_lo));
              hi[h] = _mm256_or_si256(hi[h], sixteen_where_bits(m_hi));
            }
          }
          const __m256i sc_lo = _mm256_shuffle_epi8(bcast8(scales + 16 * c), spread);
          const __m256i sc_hi = _mm256_shuffle_epi8(bcast8(scales + 16 * c + 8), spread);
          for (int r = 0; r < kRows; ++r) {
            const int8_t* xq = x[r][b].qs + 64 * c;
            const __m256i p_lo = _mm256_add_epi16(
                _mm256_add_epi16(_mm256_maddubs_epi16(lo[0], bcast8(xq)), _mm256_maddubs_epi16(lo[1], bcast8(xq + 8))),
                _mm256_add_epi16(_mm256_maddubs_epi16(lo[2], bcast8(xq + 16)),
                                 _mm256_maddubs_epi16(lo[3], bcast8(xq + 24))));
            const __m256i p_hi = _mm256_add_epi16(
                _mm256_add_epi16(_mm256_maddubs_epi16(hi[0], bcast8(xq + 32)),
                                 _mm256_maddubs_epi16(hi[1], bcast8(xq + 40))),
                _mm256_add_epi16(_mm256_maddubs_epi16(hi[2], bcast8(xq + 48)),
                                 _mm256_maddubs_epi16(hi[3], bcast8(xq + 56))));
            isum[set][r] = _mm256_add_epi32(
                isum[set][r], _mm256_add_epi32(_mm256_madd_epi16(p_lo, sc_lo), _mm256_madd_epi16(p_hi, sc_hi)));
          }
        }
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
      const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 16)));
      for (int r = 0; r < kRows; ++r) {
        const int16_t* xs = sub_sums[r] + 8 * b;
        const __m256i mins = _mm256_add_epi32(
            _mm256_add_epi32(_mm256_madd_epi16(m[0], bcast4(xs)), _mm256_madd_epi16(m[1], bcast4(xs + 2))),
            _mm256_add_epi32(_mm256_madd_epi16(m[2], bcast4(xs + 4)), _mm256_madd_epi16(m[3], bcast4(xs + 6))));
        const __m256 dx = _mm256_set1_ps(x[r][b].d);
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(_mm256_hadd_epi32(isum[0][r], isum[1][r])),
                                 acc[r]);
        // −(dmin·dx) by flipping the sign bit, as the row kernels negate.
        acc[r] = _mm256_fmadd_ps(_mm256_xor_ps(_mm256_mul_ps(dmin, dx), _mm256_set1_ps(-0.0f)),
                                 _mm256_cvtepi32_ps(mins), acc[r]);
      }
    }
    write_group_outputs<kRows>(a, g, acc);
  }
}

template <int kRows>
LOOM_TARGET_AVX2 void q4_Kx8_rows_avx2(const QdotArgs& a) {
  k4x8_rows_avx2<false, kRows>(a);
}
template <int kRows>
LOOM_TARGET_AVX2 void q5_Kx8_rows_avx2(const QdotArgs& a) {
  k4x8_rows_avx2<true, kRows>(a);
}

}  // namespace
}  // namespace loom::cpu::detail
#endif
