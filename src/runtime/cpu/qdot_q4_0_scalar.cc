// Q4_0 × int8 activations, portable reference for the SIMD kernels.
#include "runtime/cpu/qdot_kernels.h"

namespace loom::cpu::detail {

void qdot_q4_0_scalar(const QdotArgs& a) {
  for (int64_t n = 0; n < a.outputs; ++n) {
    const BlockQ4_0* w = qdot_weight_row<BlockQ4_0>(a, n);
    float acc[kQTileRows] = {};
    for (int64_t b = 0; b < a.blocks; ++b) {
      const float dw = f16_to_f32(w[b].d);
      for (int r = 0; r < a.m; ++r) {
        const ActBlockQ8x32& x = qdot_act_row<ActBlockQ8x32>(a, r)[b];
        int32_t s = 0;
        for (int j = 0; j < 16; ++j) {
          s += ((w[b].qs[j] & 0xF) - 8) * x.qs[j];
          s += ((w[b].qs[j] >> 4) - 8) * x.qs[j + 16];
        }
        acc[r] = qdot_step(acc[r], dw * x.d, s);
      }
    }
    for (int r = 0; r < a.m; ++r) a.y[r * a.ldy + n] = qdot_finish(acc[r], a.bias, n);
  }
}

}  // namespace loom::cpu::detail
