// The batch-1 kernel Q4_K and Q5_K share (their blocks differ only in Q5_K's fifth
// level bit, qh), for qdot_x86.h's primitives (included by qdot_q4_K_x86.h and
// qdot_q5_K_x86.h).
#pragma once

#include <type_traits>

#include "runtime/cpu/qdot_x86.h"

namespace loom::cpu::detail {
namespace {

// Decode (one activation row): four outputs at a time share one reduction per
// block; per sub-block maddubs gives exact int16 pair sums (levels ≤ 31, so
// 2·31·128 fits) and madd applies the scale as it widens to int32, and the min
// term is one madd of the row's 16 bsums with the mins, each taken twice. Q5_K's
// per-row loop used to multiply every sub-block sum by its scale (vpmulld) and
// reduce each row alone: 10 GB/s at 2048→8192 on a Zen 4, against 23-27 here.
template <class Block>
LOOM_QDOT_TARGET void qdot_k4_decode4(const QdotArgs& a, int64_t n) {
  constexpr bool kFifthBit = std::is_same_v<Block, BlockQ5_K>;
  const __m256i low4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
  // Byte pairs (2j, 2j + 1) in every int16 lane: scale j broadcast.
  alignas(32) static const int8_t kPick[8][32] = {
#define LOOM_PICK(j) {2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, \
                      2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j,      \
                      2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1}
      LOOM_PICK(0), LOOM_PICK(1), LOOM_PICK(2), LOOM_PICK(3), LOOM_PICK(4), LOOM_PICK(5), LOOM_PICK(6), LOOM_PICK(7)};
#undef LOOM_PICK
  const ActBlockQ8K* x = qdot_act_row<ActBlockQ8K>(a, 0);
  const Block* w[4];
  for (int i = 0; i < 4; ++i) w[i] = qdot_weight_row<Block>(a, n + i);
  __m128 acc = _mm_setzero_ps();
  GroupPrefetch ahead(a, w[0], 4, sizeof(Block));
  for (int64_t b = 0; b < a.blocks; ++b) {
    if constexpr (kGroupPrefetch) ahead.step();
    const __m256i bsums = load256(x[b].bsums);
    __m256i scaled[4], mins[4];
    for (int i = 0; i < 4; ++i) {
      const Block& wb = w[i][b];
      if constexpr (!kGroupPrefetch) prefetch_ahead(a, &wb, sizeof(Block));
      const __m128i sm = q4_K_scales_mins(wb.scales);
      const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
      mins[i] = _mm256_madd_epi16(bsums, _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm)));
      __m256i qh = _mm256_setzero_si256();
      if constexpr (kFifthBit) qh = load256(wb.qh);
      __m256i sum = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i v = load256(wb.qs + 32 * c);
        __m256i q_lo = _mm256_and_si256(v, low4), q_hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        if constexpr (kFifthBit) {
          // bit 2c of qh[l] is bit 4 of element l of sub-block 2c, bit 2c + 1 that of 2c + 1
          q_lo = _mm256_or_si256(
              q_lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), 4), bit4));
          q_hi = _mm256_or_si256(
              q_hi, _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c + 1)), 4), bit4));
        }
        const __m256i lo = _mm256_maddubs_epi16(q_lo, load256(x[b].qs + 64 * c));
        const __m256i hi = _mm256_maddubs_epi16(q_hi, load256(x[b].qs + 64 * c + 32));
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

}  // namespace
}  // namespace loom::cpu::detail
