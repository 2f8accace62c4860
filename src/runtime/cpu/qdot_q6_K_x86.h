// Q6_K kernel body for qdot_x86.h's primitives (included by the per-ISA files).
#pragma once

#include "runtime/cpu/qdot_x86.h"

namespace loom::cpu::detail {
namespace {

// Levels 0..63 of a block, q[4h + g] for elements 128h + 32g .. +31 (sub-blocks
// 8h + 2g and 8h + 2g + 1).
LOOM_QDOT_TARGET LOOM_INLINE void q6_K_levels(const BlockQ6_K& w, __m256i* q) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
  for (int h = 0; h < 2; ++h) {
    const __m256i l0 = load256(w.ql + 64 * h), l1 = load256(w.ql + 64 * h + 32);
    const __m256i hi = load256(w.qh + 32 * h);
    // Bits 2g, 2g + 1 of qh moved to bits 4-5 (16-bit shifts: what crosses into
    // the neighbouring byte lands outside 0x30).
    const __m256i tops[4] = {_mm256_and_si256(_mm256_slli_epi16(hi, 4), bits45),
                             _mm256_and_si256(_mm256_slli_epi16(hi, 2), bits45), _mm256_and_si256(hi, bits45),
                             _mm256_and_si256(_mm256_srli_epi16(hi, 2), bits45)};
    q[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, low4), tops[0]);
    q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, low4), tops[1]);
    q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), tops[2]);
    q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4), tops[3]);
  }
}

// Decode (one activation row): four outputs at a time share one reduction per
// block; maddubs gives exact int16 pair sums (levels ≤ 63: 2·63·127 fits), madd
// applies each 16-element sub-block's scale as it widens, and the −32 of every
// level is one madd of the row's bsums with the scales, taken off before the sum.
LOOM_QDOT_TARGET void qdot_q6_K_decode4(const QdotArgs& a, int64_t n) {
  // Low 128-bit lane: int16 2i's bytes; high lane: 2i + 1's (both lanes hold the
  // same 8 scales, so one in-lane shuffle puts sub-block 2i's scale on elements
  // 0-15 and 2i + 1's on 16-31).
  alignas(32) static const int8_t kPick[4][32] = {
#define LOOM_PICK(i)                                                                                               \
  {4 * i, 4 * i + 1, 4 * i, 4 * i + 1, 4 * i, 4 * i + 1, 4 * i, 4 * i + 1, 4 * i, 4 * i + 1, 4 * i, 4 * i + 1,     \
   4 * i, 4 * i + 1, 4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3, 4 * i + 2, \
   4 * i + 3, 4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3}
      LOOM_PICK(0), LOOM_PICK(1), LOOM_PICK(2), LOOM_PICK(3)};
#undef LOOM_PICK
  const ActBlockQ8K* x = qdot_act_row<ActBlockQ8K>(a, 0);
  const BlockQ6_K* w[4];
  for (int i = 0; i < 4; ++i) w[i] = qdot_weight_row<BlockQ6_K>(a, n + i);
  __m128 acc = _mm_setzero_ps();
  GroupPrefetch ahead(a, w[0], 4, sizeof(BlockQ6_K));
  for (int64_t b = 0; b < a.blocks; ++b) {
    if constexpr (kGroupPrefetch) ahead.step();
    const __m256i bsums = load256(x[b].bsums);
    __m256i total[4];
    for (int i = 0; i < 4; ++i) {
      const BlockQ6_K& wb = w[i][b];
      if constexpr (!kGroupPrefetch) prefetch_ahead(a, &wb, sizeof(BlockQ6_K));
      const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scales)));
      const __m256i sc_lo = _mm256_permute2x128_si256(sc16, sc16, 0x00);  // scales 0-7 in both lanes
      const __m256i sc_hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);  // scales 8-15
      __m256i q[8];
      q6_K_levels(wb, q);
      __m256i sum = _mm256_slli_epi32(_mm256_madd_epi16(bsums, sc16), 5);
      sum = _mm256_sub_epi32(_mm256_setzero_si256(), sum);
      for (int k = 0; k < 8; ++k) {
        const __m256i pairs = _mm256_maddubs_epi16(q[k], load256(x[b].qs + 32 * k));
        const __m256i scale = _mm256_shuffle_epi8(k < 4 ? sc_lo : sc_hi, load256(kPick[k % 4]));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, scale));
      }
      total[i] = sum;
    }
    const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16(static_cast<short>(w[0][b].d), static_cast<short>(w[1][b].d),
                                                  static_cast<short>(w[2][b].d), static_cast<short>(w[3][b].d), 0, 0,
                                                  0, 0));
    acc = qdot_step4(acc, _mm_mul_ps(dw, _mm_set1_ps(x[b].d)), hsum4_i32(total[0], total[1], total[2], total[3]));
  }
  alignas(16) float out[4];
  _mm_store_ps(out, acc);
  for (int i = 0; i < 4; ++i) a.y[n + i] = qdot_finish(out[i], a.bias, n + i);
}

LOOM_QDOT_TARGET void qdot_q6_K_body(const QdotArgs& a) {
  int64_t n0 = 0;
  if (a.m == 1) {
    for (; n0 + 4 <= a.outputs; n0 += 4) qdot_q6_K_decode4(a, n0);
  }
  for (int64_t n = n0; n < a.outputs; ++n) {
    const BlockQ6_K* w = qdot_weight_row<BlockQ6_K>(a, n);
    __m128 acc = _mm_setzero_ps();  // lane r: activation row r
    for (int64_t b = 0; b < a.blocks; ++b) {
      prefetch_ahead(a, &w[b], sizeof(BlockQ6_K));
      __m256i q[8];
      q6_K_levels(w[b], q);
      __m256i scale[8];  // lanes 0-3: sub-block 2i, lanes 4-7: 2i + 1
      for (int i = 0; i < 8; ++i) {
        scale[i] = _mm256_set_m128i(_mm_set1_epi32(w[b].scales[2 * i + 1]), _mm_set1_epi32(w[b].scales[2 * i]));
      }
      const float d = f16_bits_to_f32(w[b].d);
      __m256i scaled[kQTileRows];
      alignas(16) int32_t offset[kQTileRows] = {};  // Σ sc_s · bsum_s: the −32 of every level
      alignas(16) float dx[kQTileRows] = {};
      for (int r = 0; r < kQTileRows; ++r) {
        scaled[r] = _mm256_setzero_si256();
        if (r >= a.m) continue;
        const ActBlockQ8K& x = qdot_act_row<ActBlockQ8K>(a, r)[b];
        dx[r] = x.d;
        for (int i = 0; i < 8; ++i) {
          const __m256i dot = dot_u8s8(q[i], load256(x.qs + 32 * i));
          scaled[r] = _mm256_add_epi32(scaled[r], _mm256_mullo_epi32(dot, scale[i]));
        }
        for (int s = 0; s < 16; ++s) offset[r] += w[b].scales[s] * x.bsums[s];
      }
      const __m128i total = _mm_sub_epi32(hsum4_i32(scaled[0], scaled[1], scaled[2], scaled[3]),
                                          _mm_slli_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(offset)), 5));
      acc = qdot_step4(acc, _mm_mul_ps(_mm_set1_ps(d), _mm_load_ps(dx)), total);
    }
    alignas(16) float out[kQTileRows];
    _mm_store_ps(out, acc);
    for (int r = 0; r < a.m; ++r) a.y[r * a.ldy + n] = qdot_finish(out[r], a.bias, n);
  }
}

}  // namespace
}  // namespace loom::cpu::detail
