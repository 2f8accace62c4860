// Q8_0 kernel body for qdot_x86.h's primitives (included by the per-ISA files).
#pragma once

#include "runtime/cpu/qdot_x86.h"

namespace loom::cpu::detail {
namespace {

LOOM_QDOT_TARGET void qdot_q8_0_body(const QdotArgs& a) {
  for (int64_t n = 0; n < a.outputs; ++n) {
    const BlockQ8_0* w = qdot_weight_row<BlockQ8_0>(a, n);
    float acc[kQTileRows] = {};
    for (int64_t b = 0; b < a.blocks; ++b) {
      // One prefetch per 64 bytes of stream: blocks are 34 bytes, so every other one.
      if (b % 2 == 0) prefetch_ahead(a, &w[b], 64);
      const __m256i q = load256(w[b].qs);
      const __m256i u = _mm256_sign_epi8(q, q);  // |q| ≤ 128 as u8; the sign moves to x
      const float dw = f16_bits_to_f32(w[b].d);
      for (int r = 0; r < a.m; ++r) {
        const ActBlockQ8x32& x = qdot_act_row<ActBlockQ8x32>(a, r)[b];
        const __m256i s = _mm256_sign_epi8(load256(x.qs), q);
        acc[r] = qdot_step(acc[r], dw * x.d, hsum_i32(dot_u8s8(u, s)));
      }
    }
    for (int r = 0; r < a.m; ++r) a.y[r * a.ldy + n] = qdot_finish(acc[r], a.bias, n);
  }
}

}  // namespace
}  // namespace loom::cpu::detail
