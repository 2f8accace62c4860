// Q4_0 kernel body for qdot_x86.h's primitives (included by the per-ISA files).
#pragma once

#include "runtime/cpu/qdot_x86.h"

namespace loom::cpu::detail {
namespace {

LOOM_QDOT_TARGET void qdot_q4_0_body(const QdotArgs& a) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
  for (int64_t n = 0; n < a.outputs; ++n) {
    const BlockQ4_0* w = qdot_weight_row<BlockQ4_0>(a, n);
    float acc[kQTileRows] = {};
    for (int64_t b = 0; b < a.blocks; ++b) {
      if (b % 4 == 0) prefetch_ahead(a, &w[b], 128);
      // Elements 0-15 are the low nibbles, 16-31 the high ones: levels 0..15, and
      // Σ(q − 8)·x = Σ q·x − Σ 8·x.
      const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
      const __m256i q = _mm256_and_si256(
          _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), low4);
      const float dw = f16_bits_to_f32(w[b].d);
      for (int r = 0; r < a.m; ++r) {
        const ActBlockQ8x32& x = qdot_act_row<ActBlockQ8x32>(a, r)[b];
        const __m256i s = load256(x.qs);
        const __m256i sum = _mm256_sub_epi32(dot_u8s8(q, s), dot_u8s8(eight, s));
        acc[r] = qdot_step(acc[r], dw * x.d, hsum_i32(sum));
      }
    }
    for (int r = 0; r < a.m; ++r) a.y[r * a.ldy + n] = qdot_finish(acc[r], a.bias, n);
  }
}

}  // namespace
}  // namespace loom::cpu::detail
