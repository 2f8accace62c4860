// Q5_K kernel body for qdot_x86.h's primitives (included by the per-ISA files).
#pragma once

#include "runtime/cpu/qdot_x86.h"

namespace loom::cpu::detail {
namespace {

// Decode (one activation row), as qdot_q4_K_decode4 with each level's fifth bit from
// qh: four outputs share one reduction per block, maddubs gives exact int16 pair sums
// (levels ≤ 31: 2·31·128 fits), madd applies the sub-block's scale as it widens, and
// the min term is one madd of the row's bsums with the mins. The per-row loop below
// multiplied every sub-block's int32 sums by its scale (vpmulld) and reduced each
// row's lanes alone: 10 GB/s on a Zen 4, where the weights stream at 30+.
LOOM_QDOT_TARGET void qdot_q5_K_decode4(const QdotArgs& a, int64_t n) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
  // Byte pairs (2j, 2j + 1) in every int16 lane: scale j broadcast.
  alignas(32) static const int8_t kPick[8][32] = {
#define LOOM_PICK(j) {2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, \
                      2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j,      \
                      2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1}
      LOOM_PICK(0), LOOM_PICK(1), LOOM_PICK(2), LOOM_PICK(3), LOOM_PICK(4), LOOM_PICK(5), LOOM_PICK(6), LOOM_PICK(7)};
#undef LOOM_PICK
  const ActBlockQ8K* x = qdot_act_row<ActBlockQ8K>(a, 0);
  const BlockQ5_K* w[4];
  for (int i = 0; i < 4; ++i) w[i] = qdot_weight_row<BlockQ5_K>(a, n + i);
  __m128 acc = _mm_setzero_ps();
  GroupPrefetch ahead(a, w[0], 4, sizeof(BlockQ5_K));
  for (int64_t b = 0; b < a.blocks; ++b) {
    if constexpr (kGroupPrefetch) ahead.step();
    const __m256i bsums = load256(x[b].bsums);
    __m256i scaled[4], mins[4];
    for (int i = 0; i < 4; ++i) {
      const BlockQ5_K& wb = w[i][b];
      if constexpr (!kGroupPrefetch) prefetch_ahead(a, &wb, sizeof(BlockQ5_K));
      const __m128i sm = q4_K_scales_mins(wb.scales);
      const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
      mins[i] = _mm256_madd_epi16(bsums, _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm)));
      const __m256i qh = load256(wb.qh);
      __m256i sum = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i v = load256(wb.qs + 32 * c);
        // bit 2c of qh[l] is bit 4 of element l of sub-block 2c, bit 2c + 1 that of 2c + 1
        const __m256i h_lo = _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), 4), bit4);
        const __m256i h_hi =
            _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c + 1)), 4), bit4);
        const __m256i lo = _mm256_maddubs_epi16(_mm256_or_si256(_mm256_and_si256(v, low4), h_lo),
                                                load256(x[b].qs + 64 * c));
        const __m256i hi = _mm256_maddubs_epi16(
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), low4), h_hi), load256(x[b].qs + 64 * c + 32));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(lo, _mm256_shuffle_epi8(sc16, load256(kPick[2 * c]))));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(hi, _mm256_shuffle_epi8(sc16, load256(kPick[2 * c + 1]))));
      }
      scaled[i] = sum;
    }
    const __m128 dxv = _mm_set1_ps(x[b].d);
    const __m128i d16 = _mm_setr_epi16(static_cast<short>(w[0][b].d), static_cast<short>(w[1][b].d),
                                       static_cast<short>(w[2][b].d), static_cast<short>(w[3][b].d),
                                       static_cast<short>(w[0][b].dmin), static_cast<short>(w[1][b].dmin),
                                       static_cast<short>(w[2][b].dmin), static_cast<short>(w[3][b].dmin));
    const __m128 d = _mm_cvtph_ps(d16), dmin = _mm_cvtph_ps(_mm_unpackhi_epi64(d16, d16));
    acc = qdot_step4(acc, _mm_mul_ps(d, dxv), hsum4_i32(scaled[0], scaled[1], scaled[2], scaled[3]));
    const __m128 dm = _mm_xor_ps(_mm_mul_ps(dmin, dxv), _mm_set1_ps(-0.0f));
    acc = qdot_step4(acc, dm, hsum4_i32(mins[0], mins[1], mins[2], mins[3]));
  }
  alignas(16) float out[4];
  _mm_store_ps(out, acc);
  for (int i = 0; i < 4; ++i) a.y[n + i] = qdot_finish(out[i], a.bias, n + i);
}

LOOM_QDOT_TARGET void qdot_q5_K_body(const QdotArgs& a) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  int64_t n0 = 0;
  if (a.m == 1) {
    for (; n0 + 4 <= a.outputs; n0 += 4) qdot_q5_K_decode4(a, n0);
  }
  for (int64_t n = n0; n < a.outputs; ++n) {
    const BlockQ5_K* w = qdot_weight_row<BlockQ5_K>(a, n);
    __m128 acc = _mm_setzero_ps();  // lane r: activation row r
    for (int64_t b = 0; b < a.blocks; ++b) {
      prefetch_ahead(a, &w[b], sizeof(BlockQ5_K));
      uint8_t sc[8], mn[8];
      for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, w[b].scales, &sc[j], &mn[j]);
      const __m256i qh = load256(w[b].qh);
      __m256i q[8];  // levels 0..31 of sub-block j; bit j of qh[l] is element l's fifth bit
      for (int c = 0; c < 4; ++c) {
        const __m256i v = load256(w[b].qs + 32 * c);
        const __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), one);
        const __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c + 1)), one);
        q[2 * c] = _mm256_or_si256(_mm256_and_si256(v, low4), _mm256_slli_epi16(h0, 4));
        q[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), low4), _mm256_slli_epi16(h1, 4));
      }
      const float d = f16_bits_to_f32(w[b].d), dmin = f16_bits_to_f32(w[b].dmin);
      __m256i scaled[kQTileRows];
      alignas(16) int32_t mins[kQTileRows] = {};
      alignas(16) float dx[kQTileRows] = {};
      for (int r = 0; r < kQTileRows; ++r) {
        scaled[r] = _mm256_setzero_si256();
        if (r >= a.m) continue;
        const ActBlockQ8K& x = qdot_act_row<ActBlockQ8K>(a, r)[b];
        dx[r] = x.d;
        for (int j = 0; j < 8; ++j) {
          const __m256i dot = dot_u8s8(q[j], load256(x.qs + 32 * j));
          scaled[r] = _mm256_add_epi32(scaled[r], _mm256_mullo_epi32(dot, _mm256_set1_epi32(sc[j])));
          mins[r] += mn[j] * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
        }
      }
      const __m128 dxv = _mm_load_ps(dx);
      acc = qdot_step4(acc, _mm_mul_ps(_mm_set1_ps(d), dxv), hsum4_i32(scaled[0], scaled[1], scaled[2], scaled[3]));
      // −(dmin·dx) by flipping the sign bit, as the scalar kernels negate.
      const __m128 dm = _mm_xor_ps(_mm_mul_ps(_mm_set1_ps(dmin), dxv), _mm_set1_ps(-0.0f));
      acc = qdot_step4(acc, dm, _mm_load_si128(reinterpret_cast<const __m128i*>(mins)));
    }
    alignas(16) float out[kQTileRows];
    _mm_store_ps(out, acc);
    for (int r = 0; r < a.m; ++r) a.y[r * a.ldy + n] = qdot_finish(out[r], a.bias, n);
  }
}

}  // namespace
}  // namespace loom::cpu::detail
