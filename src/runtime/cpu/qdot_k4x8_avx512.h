// The body of the Q4_Kx8 and Q5_Kx8 decode kernels (qdot_q4_Kx8_avx512.cc,
// qdot_q5_Kx8_avx512.cc): Q4_K × int8 activations for up to kQ4_Kx8Avx512Rows rows
// (decode and small batches), AVX-512 (BW, VNNI), over weights interleaved in groups
// of 8 rows (qlayout_q4_Kx8.h): both runs of a pair in one zmm (qdot_x8_avx512.h), each
// sub-block's levels summed against the activations by vpdpbusd into int32 lanes
// (four instructions a sub-block, where maddubs took four plus three adds and a
// vpdpwssd), then times its scale (vpmulld): the same exact int32 sums, 2-5% faster
// on a Zen 4 (M = 1 and 4, weights in cache). The f32 steps are the row kernels'
// (qdot_kernels.h), so results are bitwise theirs. Up to eight activation rows a call
// (kQ4_Kx8Avx512Rows): at 32 sequences the unpacking of each block's levels and scales
// is shared by twice the rows. Q5_K (qlayout_q5_Kx8.h) differs only in its levels'
// fifth bit, added as 16 to the bytes its mask selects (one masked vpaddb a vector).
#pragma once

#include "runtime/cpu/matmul_kernels.h"
#if defined(LOOM_MATMUL_X86)
#include <immintrin.h>

#include <cstring>

#include "runtime/cpu/qdot_kernels.h"
#include "runtime/cpu/qdot_x8_avx512.h"
#include "runtime/cpu/qlayout_q4_Kx8.h"
#include "runtime/cpu/qlayout_q5_Kx8.h"

namespace loom::cpu::detail {
namespace {

// How far ahead the group stream is prefetched: at batch 1 on 2 threads of a Zen 5
// (2048->8192 and 8192->2048, a plain read 58-62 GB/s), Q4_K 44-65 GB/s at 4 KB,
// 71-72 at 8 KB, 54-60 at 16 KB; Q6_K 62-68, 68-71, 69-70.
// Into L2 (_MM_HINT_T1), as Q6_Kx8 does, not non-temporal: a group block is 1152
// bytes (Q5_K 1408) read as several runs, and on a Zen 4 (32 KB L1) the non-temporal
// lines were partly gone before use. The Q4_K_M file at batch 1 (loom bench, the
// weights' read measured around each run) went from 74-78% to 87-91% of that read,
// 39.6-42.5 → 47.8-48.3 tok/s; 4, 8 and 16 KB ahead gave 86-92% alike.
constexpr size_t kPrefetchBytes = 8192;

// A sub-block's scale bytes of rows 0..7 → each row's scale in the two int32 lanes of
// its run slot (rows 0, 1, 4, 5 in the low 256 bits, 2, 3, 6, 7 in the high).
alignas(16) constexpr int8_t kSpreadScales[16] = {0, 0, 1, 1, 4, 4, 5, 5, 2, 2, 3, 3, 6, 6, 7, 7};

LOOM_TARGET_X8_AVX512 LOOM_INLINE __m512i scales_by_lane(const uint8_t* sub_block_scales, __m128i spread) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sub_block_scales));
  return _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_shuffle_epi8(bytes, spread));
}

// 64 bits at p as a byte mask (bit i: byte i of a zmm).
LOOM_TARGET_X8_AVX512 LOOM_INLINE __mmask64 load_mask64(const uint8_t* p) {
  uint64_t m;
  std::memcpy(&m, p, 8);
  return static_cast<__mmask64>(m);
}

// kQ5: Q5_Kx8 group blocks, else Q4_Kx8.
template <bool kQ5, int kRows>
LOOM_TARGET_X8_AVX512 void k4x8_rows(const QdotArgs& a) {
  constexpr size_t kBlockBytes = kQ5 ? kQ5_Kx8BlockBytes : kQ4_Kx8BlockBytes;
  const __m512i low4z = _mm512_set1_epi8(0x0F), fifth_bit = _mm512_set1_epi8(0x10);
  const __m128i spread = _mm_load_si128(reinterpret_cast<const __m128i*>(kSpreadScales));
  const size_t group_bytes = static_cast<size_t>(a.blocks) * kBlockBytes;
  const ActBlockQ8K* x[kRows];
  const int16_t* sub_sums[kRows];
  for (int r = 0; r < kRows; ++r) {
    x[r] = qdot_act_row<ActBlockQ8K>(a, r);
    sub_sums[r] = a.act_sub_sums + static_cast<size_t>(r) * static_cast<size_t>(a.blocks) * 8;
  }
  const char* ahead = reinterpret_cast<const char*>(a.w) + kPrefetchBytes;
  for (int64_t g = 0; g < a.outputs / kX8Rows; ++g) {
    const uint8_t* w = a.w + group_bytes * static_cast<size_t>(g);
    __m256 acc[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.blocks; ++b) {
      const uint8_t* o = w + static_cast<size_t>(b) * kBlockBytes;
      if (a.stream) prefetch_group_stream<_MM_HINT_T1>(ahead, o, kBlockBytes, kPrefetchBytes);
      alignas(32) uint8_t scales[64];
      __m256i m[4];  // mins of sub-blocks (0, 1), (2, 3), (4, 5), (6, 7)
      q4_Kx8_scales_mins(o, scales, m);

      __m512i isum[kRows];
      for (int r = 0; r < kRows; ++r) isum[r] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        const uint8_t* run = o + kQ4_Kx8QsOffset + 256 * c;
        __m512i lo[4], hi[4];
        for (int h = 0; h < 4; ++h) {
          const __m512i v = load512(run + 64 * h);
          lo[h] = _mm512_and_si512(v, low4z);
          hi[h] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4z);
          if constexpr (kQ5) {
            lo[h] = _mm512_mask_add_epi8(lo[h], load_mask64(o + q5_Kx8_mask_offset(c, h, 0)), lo[h], fifth_bit);
            hi[h] = _mm512_mask_add_epi8(hi[h], load_mask64(o + q5_Kx8_mask_offset(c, h, 1)), hi[h], fifth_bit);
          }
        }
        const __m512i sc_lo = scales_by_lane(scales + 16 * c, spread);
        const __m512i sc_hi = scales_by_lane(scales + 16 * c + 8, spread);
        for (int r = 0; r < kRows; ++r) {
          const int8_t* xq = x[r][b].qs + 64 * c;
          __m512i s_lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[0], bcast8_512(xq));
          __m512i s_hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[0], bcast8_512(xq + 32));
          s_lo = _mm512_dpbusd_epi32(s_lo, lo[1], bcast8_512(xq + 8));
          s_hi = _mm512_dpbusd_epi32(s_hi, hi[1], bcast8_512(xq + 40));
          s_lo = _mm512_dpbusd_epi32(s_lo, lo[2], bcast8_512(xq + 16));
          s_hi = _mm512_dpbusd_epi32(s_hi, hi[2], bcast8_512(xq + 48));
          s_lo = _mm512_dpbusd_epi32(s_lo, lo[3], bcast8_512(xq + 24));
          s_hi = _mm512_dpbusd_epi32(s_hi, hi[3], bcast8_512(xq + 56));
          isum[r] = _mm512_add_epi32(isum[r], _mm512_add_epi32(_mm512_mullo_epi32(s_lo, sc_lo), _mm512_mullo_epi32(s_hi, sc_hi)));
        }
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
      const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 16)));
      for (int r = 0; r < kRows; ++r) {
        const int16_t* xs = sub_sums[r] + 8 * b;
        __m256i mins = _mm256_madd_epi16(m[0], bcast4(xs));
        mins = _mm256_dpwssd_epi32(mins, m[1], bcast4(xs + 2));
        mins = _mm256_dpwssd_epi32(mins, m[2], bcast4(xs + 4));
        mins = _mm256_dpwssd_epi32(mins, m[3], bcast4(xs + 6));
        const __m256 dx = _mm256_set1_ps(x[r][b].d);
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(row_sums_x8(isum[r])), acc[r]);
        // −(dmin·dx) by flipping the sign bit, as the row kernels negate.
        acc[r] = _mm256_fmadd_ps(_mm256_xor_ps(_mm256_mul_ps(dmin, dx), _mm256_set1_ps(-0.0f)),
                                 _mm256_cvtepi32_ps(mins), acc[r]);
      }
    }
    write_group_outputs<kRows>(a, g, acc);
  }
}

// Entry point body: k4x8_rows<kQ5, a.m> for 1..8 rows.
template <bool kQ5>
LOOM_TARGET_X8_AVX512 void k4x8_by_rows(const QdotArgs& a) {
  switch (a.m) {
    case 1: k4x8_rows<kQ5, 1>(a); break;
    case 2: k4x8_rows<kQ5, 2>(a); break;
    case 3: k4x8_rows<kQ5, 3>(a); break;
    case 4: k4x8_rows<kQ5, 4>(a); break;
    case 5: k4x8_rows<kQ5, 5>(a); break;
    case 6: k4x8_rows<kQ5, 6>(a); break;
    case 7: k4x8_rows<kQ5, 7>(a); break;
    default: k4x8_rows<kQ5, 8>(a); break;
  }
}
static_assert(kQ4_Kx8Avx512Rows == 8, "k4x8_by_rows instantiates 1..8 rows");

}  // namespace
}  // namespace loom::cpu::detail
#endif
