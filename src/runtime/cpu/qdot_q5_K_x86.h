// Q5_K kernel body for qdot_x86.h's primitives (included by the per-ISA files).
#pragma once

#include "runtime/cpu/qdot_k4_decode4_x86.h"
#include "runtime/cpu/qdot_x86.h"

namespace loom::cpu::detail {
namespace {

LOOM_QDOT_TARGET void qdot_q5_K_body(const QdotArgs& a) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  int64_t n0 = 0;
  if (a.m == 1) {
    for (; n0 + 4 <= a.outputs; n0 += 4) qdot_k4_decode4<BlockQ5_K>(a, n0);
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
