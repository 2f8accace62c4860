// Scalar reference for RoPE: Transformers' rotary embedding + apply_rotary_pos_emb, one element
// at a time in f32 — freqs = inv_freq * position, cos/sin × attention_scaling, then
// q * cos + rotate_half(q) * sin.
#include <cmath>

#include "loom/runtime/cpu/rope.h"

namespace loom::cpu {

void rope_apply_ref(float* x, int64_t rows, int64_t num_heads, int64_t head_dim, int64_t row_stride,
                    const int32_t* positions, const float* inv_freq, int64_t rotary_dim, float attention_scaling) {
  const int64_t half = rotary_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float pos = static_cast<float>(positions[r]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = inv_freq[i] * pos;
      const float c = std::cos(angle) * attention_scaling;
      const float s = std::sin(angle) * attention_scaling;
      for (int64_t h = 0; h < num_heads; ++h) {
        float* xh = x + r * row_stride + h * head_dim;
        const float x1 = xh[i], x2 = xh[i + half];
        xh[i] = x1 * c + (-x2) * s;
        xh[i + half] = x2 * c + x1 * s;
      }
    }
  }
}

}  // namespace loom::cpu
