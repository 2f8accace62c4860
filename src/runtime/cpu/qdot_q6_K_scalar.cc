// Q6_K × Q8_K-style activations, portable reference for the SIMD kernels.
#include "runtime/cpu/qdot_kernels.h"

namespace loom::cpu::detail {

// Level (0..63) of element e of a Q6_K block (layout in core/quantize_k.cc).
inline int q6_level(const BlockQ6_K& w, int e) {
  const int h = e / 128, g = (e % 128) / 32, l = e % 32;
  const uint8_t lo = w.ql[64 * h + l + 32 * (g & 1)];
  return ((g < 2 ? lo & 0xF : lo >> 4)) | (((w.qh[32 * h + l] >> (2 * g)) & 3) << 4);
}

void qdot_q6_K_scalar(const QdotArgs& a) {
  for (int64_t n = 0; n < a.outputs; ++n) {
    const BlockQ6_K* w = qdot_weight_row<BlockQ6_K>(a, n);
    float acc[kQTileRows] = {};
    for (int64_t b = 0; b < a.blocks; ++b) {
      const float d = f16_to_f32(w[b].d);
      for (int r = 0; r < a.m; ++r) {
        const ActBlockQ8K& x = qdot_act_row<ActBlockQ8K>(a, r)[b];
        int32_t total = 0;
        for (int s = 0; s < 16; ++s) {
          int32_t dot = 0;
          for (int i = 0; i < 16; ++i) dot += q6_level(w[b], 16 * s + i) * x.qs[16 * s + i];
          total += w[b].scales[s] * (dot - 32 * x.bsums[s]);
        }
        acc[r] = qdot_step(acc[r], d * x.d, total);
      }
    }
    for (int r = 0; r < a.m; ++r) a.y[r * a.ldy + n] = qdot_finish(acc[r], a.bias, n);
  }
}

}  // namespace loom::cpu::detail
