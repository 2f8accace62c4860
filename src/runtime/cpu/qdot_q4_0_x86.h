// Q4_0 kernel body for qdot_x86.h's primitives (included by the per-ISA files).
#pragma once

#include "runtime/cpu/qdot_x86.h"

namespace loom::cpu::detail {
namespace {

// Levels 0..15 of a block: elements 0-15 are the low nibbles, 16-31 the high ones.
LOOM_QDOT_TARGET LOOM_INLINE __m256i q4_0_levels(const BlockQ4_0& w) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0F));
}

// Σ(q − 8)·x = Σ q·x − Σ 8·x, as int32 lane sums.
LOOM_QDOT_TARGET LOOM_INLINE __m256i q4_0_dot(__m256i q, const ActBlockQ8x32& x) {
  const __m256i s = load256(x.qs);
  return _mm256_sub_epi32(dot_u8s8(q, s), dot_u8s8(_mm256_set1_epi8(8), s));
}

#if LOOM_QDOT_VNNI == 0
// Decode in AVX2 without VNNI, eight outputs per pass: two outputs' 16 bytes of
// nibbles share a ymm ([A | B]), so one mask and one shift give both outputs'
// low and high levels, against the block's first and last 16 activations
// broadcast to both halves. The two maddubs add in int16 (≤ 4·15·127) before
// one madd; the −8·Σx term is added once per block as lane partials; one
// reduction (three hadds and a permute) per eight outputs and block.
LOOM_QDOT_TARGET LOOM_INLINE __m256i q4_0_pair_dot(const BlockQ4_0& wa, const BlockQ4_0& wb, __m256i xlo,
                                                   __m256i xhi) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wa.qs))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.qs)), 1);
  const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
  const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo), _mm256_maddubs_epi16(hi, xhi));
  return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
}

// Eight outputs from n: y[n + i] for the one activation row.
LOOM_QDOT_TARGET void q4_0_decode8(const QdotArgs& a, int64_t n, const ActBlockQ8x32* x) {
  const BlockQ4_0* w[8];
  for (int i = 0; i < 8; ++i) w[i] = qdot_weight_row<BlockQ4_0>(a, n + i);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256 acc = _mm256_setzero_ps();
  GroupPrefetch ahead(a, w[0], 8, sizeof(BlockQ4_0));
  for (int64_t b = 0; b < a.blocks; ++b) {
    ahead.step();
    const __m256i xlo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs)));
    const __m256i xhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs + 16)));
    // −8·Σx as four partials in each half: each output's pair sums start there.
    const __m256i sx = dot_u8s8(_mm256_set1_epi8(8), load256(x[b].qs));
    const __m128i base4 = _mm_sub_epi32(_mm_setzero_si128(), _mm_add_epi32(_mm256_castsi256_si128(sx), _mm256_extracti128_si256(sx, 1)));
    const __m256i base = _mm256_broadcastsi128_si256(base4);
    const __m256i ab = _mm256_add_epi32(base, q4_0_pair_dot(w[0][b], w[1][b], xlo, xhi));
    const __m256i cd = _mm256_add_epi32(base, q4_0_pair_dot(w[2][b], w[3][b], xlo, xhi));
    const __m256i ef = _mm256_add_epi32(base, q4_0_pair_dot(w[4][b], w[5][b], xlo, xhi));
    const __m256i gh = _mm256_add_epi32(base, q4_0_pair_dot(w[6][b], w[7][b], xlo, xhi));
    // [A C E G | B D F H] → [A B C D E F G H]
    const __m256i isum = _mm256_permutevar8x32_epi32(
        _mm256_hadd_epi32(_mm256_hadd_epi32(ab, cd), _mm256_hadd_epi32(ef, gh)), order);
    const __m128i d16 = _mm_setr_epi16(static_cast<short>(w[0][b].d), static_cast<short>(w[1][b].d),
                                       static_cast<short>(w[2][b].d), static_cast<short>(w[3][b].d),
                                       static_cast<short>(w[4][b].d), static_cast<short>(w[5][b].d),
                                       static_cast<short>(w[6][b].d), static_cast<short>(w[7][b].d));
    const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(d16), _mm256_set1_ps(x[b].d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc);
  }
  alignas(32) float out[8];
  _mm256_store_ps(out, acc);
  for (int i = 0; i < 8; ++i) a.y[n + i] = qdot_finish(out[i], a.bias, n + i);
}
#endif

LOOM_QDOT_TARGET void qdot_q4_0_body(const QdotArgs& a) {
  const __m256i zero = _mm256_setzero_si256();
  int64_t n = 0;
#if LOOM_QDOT_VNNI == 0
  if (a.m == 1) {
    const ActBlockQ8x32* x = qdot_act_row<ActBlockQ8x32>(a, 0);
    for (; n + 8 <= a.outputs; n += 8) q4_0_decode8(a, n, x);
  }
#endif
  // Decode: four outputs at a time share one reduction per block.
  if (a.m == 1) {
    const ActBlockQ8x32* x = qdot_act_row<ActBlockQ8x32>(a, 0);
    for (; n + 4 <= a.outputs; n += 4) {
      const BlockQ4_0* w[4];
      for (int i = 0; i < 4; ++i) w[i] = qdot_weight_row<BlockQ4_0>(a, n + i);
      __m128 acc = _mm_setzero_ps();
      for (int64_t b = 0; b < a.blocks; ++b) {
        if (b % 4 == 0) {
          for (int i = 0; i < 4; ++i) prefetch_ahead(a, &w[i][b], 128);
        }
        // −Σ 8·x once per block, where each output's Σ q·x starts.
        const __m256i s = load256(x[b].qs);
        const __m256i base = _mm256_sub_epi32(zero, dot_u8s8(_mm256_set1_epi8(8), s));
        const __m128i isum =
            hsum4_i32(dot_u8s8_acc(base, q4_0_levels(w[0][b]), s), dot_u8s8_acc(base, q4_0_levels(w[1][b]), s),
                      dot_u8s8_acc(base, q4_0_levels(w[2][b]), s), dot_u8s8_acc(base, q4_0_levels(w[3][b]), s));
        const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16(static_cast<short>(w[0][b].d), static_cast<short>(w[1][b].d),
                                                      static_cast<short>(w[2][b].d), static_cast<short>(w[3][b].d), 0,
                                                      0, 0, 0));
        acc = qdot_step4(acc, _mm_mul_ps(dw, _mm_set1_ps(x[b].d)), isum);
      }
      alignas(16) float out[4];
      _mm_store_ps(out, acc);
      for (int i = 0; i < 4; ++i) a.y[n + i] = qdot_finish(out[i], a.bias, n + i);
    }
  }
  for (; n < a.outputs; ++n) {
    const BlockQ4_0* w = qdot_weight_row<BlockQ4_0>(a, n);
    const ActBlockQ8x32* x[kQTileRows];
    for (int r = 0; r < kQTileRows; ++r) x[r] = qdot_act_row<ActBlockQ8x32>(a, r < a.m ? r : 0);
    __m128 acc = _mm_setzero_ps();  // lane r: activation row r
    for (int64_t b = 0; b < a.blocks; ++b) {
      if (b % 4 == 0) prefetch_ahead(a, &w[b], 128);
      const __m256i q = q4_0_levels(w[b]);
      __m256i dots[kQTileRows];
      for (int r = 0; r < kQTileRows; ++r) dots[r] = r < a.m ? q4_0_dot(q, x[r][b]) : zero;
      const __m128 dx = _mm_setr_ps(x[0][b].d, x[1][b].d, x[2][b].d, x[3][b].d);
      acc = qdot_step4(acc, _mm_mul_ps(_mm_set1_ps(f16_bits_to_f32(w[b].d)), dx),
                       hsum4_i32(dots[0], dots[1], dots[2], dots[3]));
    }
    alignas(16) float out[4];
    _mm_store_ps(out, acc);
    for (int r = 0; r < a.m; ++r) a.y[r * a.ldy + n] = qdot_finish(out[r], a.bias, n);
  }
}

}  // namespace
}  // namespace loom::cpu::detail
