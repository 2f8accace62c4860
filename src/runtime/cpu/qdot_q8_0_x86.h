// Q8_0 kernel body for qdot_x86.h's primitives (included by the per-ISA files).
#pragma once

#include "runtime/cpu/qdot_x86.h"

namespace loom::cpu::detail {
namespace {

// Block b of weight row w against activation block x: the int32 lane sums.
LOOM_QDOT_TARGET LOOM_INLINE __m256i q8_0_dot(const BlockQ8_0& w, const ActBlockQ8x32& x) {
  const __m256i q = load256(w.qs);
  // |q| ≤ 128 as u8, and the sign moves to x.
  return dot_u8s8(_mm256_sign_epi8(q, q), _mm256_sign_epi8(load256(x.qs), q));
}

LOOM_QDOT_TARGET void qdot_q8_0_body(const QdotArgs& a) {
  const __m256i zero = _mm256_setzero_si256();
  int64_t n = 0;
  // Decode: four outputs at a time share one reduction per block.
  if (a.m == 1) {
    const ActBlockQ8x32* x = qdot_act_row<ActBlockQ8x32>(a, 0);
    for (; n + 4 <= a.outputs; n += 4) {
      const BlockQ8_0* w[4];
      for (int i = 0; i < 4; ++i) w[i] = qdot_weight_row<BlockQ8_0>(a, n + i);
      __m128 acc = _mm_setzero_ps();
      GroupPrefetch ahead(a, w[0], 4, sizeof(BlockQ8_0));
      for (int64_t b = 0; b < a.blocks; ++b) {
        if constexpr (kGroupPrefetch) {
          ahead.step();
        } else if (b % 2 == 0) {
          for (int i = 0; i < 4; ++i) prefetch_ahead(a, &w[i][b], 64);
        }
        const __m128i isum = hsum4_i32(q8_0_dot(w[0][b], x[b]), q8_0_dot(w[1][b], x[b]), q8_0_dot(w[2][b], x[b]),
                                       q8_0_dot(w[3][b], x[b]));
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
    const BlockQ8_0* w = qdot_weight_row<BlockQ8_0>(a, n);
    const ActBlockQ8x32* x[kQTileRows];
    for (int r = 0; r < kQTileRows; ++r) x[r] = qdot_act_row<ActBlockQ8x32>(a, r < a.m ? r : 0);
    __m128 acc = _mm_setzero_ps();  // lane r: activation row r
    for (int64_t b = 0; b < a.blocks; ++b) {
      if (b % 2 == 0) prefetch_ahead(a, &w[b], 64);
      __m256i dots[kQTileRows];
      for (int r = 0; r < kQTileRows; ++r) dots[r] = r < a.m ? q8_0_dot(w[b], x[r][b]) : zero;
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
