// Q5_K × Q8_K-style activations, portable reference for the SIMD kernels.
#include "runtime/cpu/qdot_kernels.h"

namespace loom::cpu::detail {

void qdot_q5_K_scalar(const QdotArgs& a) {
  for (int64_t n = 0; n < a.outputs; ++n) {
    const BlockQ5_K* w = qdot_weight_row<BlockQ5_K>(a, n);
    float acc[kQTileRows] = {};
    for (int64_t b = 0; b < a.blocks; ++b) {
      uint8_t sc[8], mn[8];
      for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, w[b].scales, &sc[j], &mn[j]);
      const float d = f16_to_f32(w[b].d), dmin = f16_to_f32(w[b].dmin);
      for (int r = 0; r < a.m; ++r) {
        const ActBlockQ8K& x = qdot_act_row<ActBlockQ8K>(a, r)[b];
        int32_t scaled = 0, mins = 0;
        for (int j = 0; j < 8; ++j) {
          const uint8_t* q = w[b].qs + 32 * (j / 2);
          const int shift = 4 * (j % 2);
          int32_t s = 0;
          for (int l = 0; l < 32; ++l) {
            const int v = ((q[l] >> shift) & 0xF) | (((w[b].qh[l] >> j) & 1) << 4);
            s += v * x.qs[32 * j + l];
          }
          scaled += sc[j] * s;
          mins += mn[j] * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
        }
        acc[r] = qdot_step(acc[r], d * x.d, scaled);
        acc[r] = qdot_step(acc[r], -(dmin * x.d), mins);
      }
    }
    for (int r = 0; r < a.m; ++r) a.y[r * a.ldy + n] = qdot_finish(acc[r], a.bias, n);
  }
}

}  // namespace loom::cpu::detail
