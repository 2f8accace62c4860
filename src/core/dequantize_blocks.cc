// Dequantization of the block types beyond Q8_0/Q4_0 and the K types Q4_K..Q6_K,
// in llama.cpp's arithmetic (ggml-quants.c's dequantize_row_*: the same products in
// the same order, no FMA), so every value equals llama.cpp's bit for bit
// (tests/core/ggml_vectors_test.cc checks against its own output).
#include <cstring>

#include "core/quantize_k.h"
#include "loom/core/quantize.h"
#include "loom/core/quantize_iq_grids.h"

namespace loom::detail {
namespace {

// Element 128h + 32j + l of a Q2_K/Q3_K/TQ2_0 block: bits 2j of qs[32h + l].
inline int crumb(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ± value, as llama.cpp's `v * (sign ? -1.f : 1.f)`.
inline float signed_by(float v, uint8_t signs, int j) { return v * ((signs >> j) & 1 ? -1.0f : 1.0f); }

}  // namespace

void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, y += 32) {
    const float d = f16_to_f32(x[b].d), m = f16_to_f32(x[b].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(x[b].qs[j] & 0xF) * d + m;
      y[j + 16] = static_cast<float>(x[b].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, y += 32) {
    const float d = f16_to_f32(x[b].d);
    const uint32_t qh = load_u32(x[b].qh);
    for (int j = 0; j < 16; ++j) {
      const int lo = (x[b].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int hi = (x[b].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      y[j] = static_cast<float>(lo - 16) * d;
      y[j + 16] = static_cast<float>(hi - 16) * d;
    }
  }
}

void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, y += 32) {
    const float d = f16_to_f32(x[b].d), m = f16_to_f32(x[b].m);
    const uint32_t qh = load_u32(x[b].qh);
    for (int j = 0; j < 16; ++j) {
      const int lo = (x[b].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int hi = (x[b].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      y[j] = static_cast<float>(lo) * d + m;
      y[j + 16] = static_cast<float>(hi) * d + m;
    }
  }
}

void dequantize_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, y += 32) {
    const float d = f16_to_f32(x[b].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kIQ4Values[x[b].qs[j] & 0xF]);
      y[j + 16] = d * static_cast<float>(kIQ4Values[x[b].qs[j] >> 4]);
    }
  }
}

void dequantize_mxfp4(const BlockMXFP4* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, y += 32) {
    const float d = mxfp4_half_scale(x[b].e);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(kMXFP4Values[x[b].qs[j] & 0xF]) * d;
      y[j + 16] = static_cast<float>(kMXFP4Values[x[b].qs[j] >> 4]) * d;
    }
  }
}

void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, y += 256) {
    const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
    for (int e = 0; e < 256; ++e) {
      const uint8_t sc = x[b].scales[e / 16];
      const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
      y[e] = dl * static_cast<float>(crumb(x[b].qs, e)) - ml;
    }
  }
}

void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, y += 256) {
    const float d = f16_to_f32(x[b].d);
    for (int e = 0; e < 256; ++e) {
      const float dl = d * static_cast<float>(q3_k_scale(x[b].scales, e / 16));
      const int hbit = (x[b].hmask[e % 32] >> (4 * (e / 128) + (e % 128) / 32)) & 1;
      y[e] = dl * static_cast<float>(crumb(x[b].qs, e) - (hbit ? 0 : 4));
    }
  }
}

void dequantize_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b) {
    const float d = f16_to_f32(x[b].d);
    for (int s = 0; s < 8; ++s, y += 32) {
      const float dl = d * static_cast<float>(iq4_xs_scale(x[b], s));
      const uint8_t* qs = x[b].qs + 16 * s;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kIQ4Values[qs[j] & 0xF]);
        y[j + 16] = dl * static_cast<float>(kIQ4Values[qs[j] >> 4]);
      }
    }
  }
}

void dequantize_iq2_xxs(const BlockIQ2_XXS* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b) {
    const float d = f16_to_f32(x[b].d);
    for (int s = 0; s < 8; ++s) {
      const uint8_t* idx = reinterpret_cast<const uint8_t*>(x[b].qs + 4 * s);
      const uint32_t aux = load_u32(x[b].qs + 4 * s + 2);
      const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint8_t signs = iq_sign_byte(aux >> (7 * l));
        for (int j = 0; j < 8; ++j) y[j] = signed_by(db * static_cast<float>(iq2xxs_grid[idx[l]][j]), signs, j);
      }
    }
  }
}

void dequantize_iq2_xs(const BlockIQ2_XS* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b) {
    const float d = f16_to_f32(x[b].d);
    for (int s = 0; s < 8; ++s) {
      const float db[2] = {d * (0.5f + static_cast<float>(x[b].scales[s] & 0xF)) * 0.25f,
                           d * (0.5f + static_cast<float>(x[b].scales[s] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint16_t q = x[b].qs[4 * s + l];
        const uint8_t signs = iq_sign_byte(q >> 9);
        for (int j = 0; j < 8; ++j) y[j] = signed_by(db[l / 2] * static_cast<float>(iq2xs_grid[q & 511][j]), signs, j);
      }
    }
  }
}

void dequantize_iq2_s(const BlockIQ2_S* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b) {
    const float d = f16_to_f32(x[b].d);
    for (int s = 0; s < 8; ++s) {
      const float db[2] = {d * (0.5f + static_cast<float>(x[b].scales[s] & 0xF)) * 0.25f,
                           d * (0.5f + static_cast<float>(x[b].scales[s] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, y += 8) {
        const int index = x[b].qs[4 * s + l] | (((x[b].qh[s] >> (2 * l)) & 3) << 8);
        const uint8_t signs = x[b].qs[32 + 4 * s + l];
        for (int j = 0; j < 8; ++j) y[j] = signed_by(db[l / 2] * static_cast<float>(iq2s_grid[index][j]), signs, j);
      }
    }
  }
}

void dequantize_iq3_xxs(const BlockIQ3_XXS* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b) {
    const float d = f16_to_f32(x[b].d);
    for (int s = 0; s < 8; ++s) {
      const uint32_t aux = load_u32(x[b].qs + 64 + 4 * s);
      const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
      const uint8_t* idx = x[b].qs + 8 * s;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint8_t signs = iq_sign_byte(aux >> (7 * l));
        for (int j = 0; j < 4; ++j) {
          y[j] = signed_by(db * static_cast<float>(iq3xxs_grid[idx[2 * l]][j]), signs, j);
          y[j + 4] = signed_by(db * static_cast<float>(iq3xxs_grid[idx[2 * l + 1]][j]), signs, j + 4);
        }
      }
    }
  }
}

void dequantize_iq3_s(const BlockIQ3_S* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b) {
    const float d = f16_to_f32(x[b].d);
    for (int s = 0; s < 8; ++s) {
      const int scale = (x[b].scales[s / 2] >> (4 * (s % 2))) & 0xF;
      const float db = d * static_cast<float>(1 + 2 * scale);
      const uint8_t* qs = x[b].qs + 8 * s;
      const uint8_t qh = x[b].qh[s];
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint8_t signs = x[b].signs[4 * s + l];
        const int i1 = qs[2 * l] | (((qh >> (2 * l)) & 1) << 8);
        const int i2 = qs[2 * l + 1] | (((qh >> (2 * l + 1)) & 1) << 8);
        for (int j = 0; j < 4; ++j) {
          y[j] = signed_by(db * static_cast<float>(iq3s_grid[i1][j]), signs, j);
          y[j + 4] = signed_by(db * static_cast<float>(iq3s_grid[i2][j]), signs, j + 4);
        }
      }
    }
  }
}

namespace {
constexpr float kIQ1Delta = 0.125f;
}

void dequantize_iq1_s(const BlockIQ1_S* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b) {
    const float d = f16_to_f32(x[b].d);
    for (int s = 0; s < 8; ++s) {
      const uint16_t qh = x[b].qh[s];
      const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float delta = qh & 0x8000 ? -kIQ1Delta : kIQ1Delta;
      for (int l = 0; l < 4; ++l, y += 8) {
        const int8_t* grid = iq1s_grid[x[b].qs[4 * s + l] | (((qh >> (3 * l)) & 7) << 8)];
        for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(grid[j]) + delta);
      }
    }
  }
}

void dequantize_iq1_m(const BlockIQ1_M* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b) {
    const float d = f16_to_f32(iq1_m_scale_bits(x[b]));
    uint16_t sc[4];
    std::memcpy(sc, x[b].scales, 8);
    for (int s = 0; s < 8; ++s) {
      const uint8_t* qh = x[b].qh + 2 * s;
      const float dl[2] = {d * static_cast<float>(2 * ((sc[s / 2] >> (6 * (s % 2))) & 7) + 1),
                           d * static_cast<float>(2 * ((sc[s / 2] >> (6 * (s % 2) + 3)) & 7) + 1)};
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint8_t h = qh[l / 2] >> (4 * (l % 2));  // 3 index bits, then the shift's sign
        const int8_t* grid = iq1s_grid[x[b].qs[4 * s + l] | ((h & 7) << 8)];
        const float delta = h & 8 ? -kIQ1Delta : kIQ1Delta;
        for (int j = 0; j < 8; ++j) y[j] = dl[l / 2] * (static_cast<float>(grid[j]) + delta);
      }
    }
  }
}

namespace {
// Base-3 digit n (most significant first) of a TQ1_0 byte, as ggml extracts it:
// the byte holds ceil(v·256 / 243); multiplying by 3^n (mod 256) moves digit n to the top.
inline int ternary_digit(uint8_t q, int n) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const uint8_t shifted = static_cast<uint8_t>(q * kPow3[n]);
  return (static_cast<uint16_t>(shifted) * 3) >> 8;
}
}  // namespace

void dequantize_tq1_0(const BlockTQ1_0* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b) {
    const float d = f16_to_f32(x[b].d);
    for (int n = 0; n < 5; ++n) {
      for (int m = 0; m < 32; ++m) *y++ = static_cast<float>(ternary_digit(x[b].qs[m], n) - 1) * d;
    }
    for (int n = 0; n < 5; ++n) {
      for (int m = 0; m < 16; ++m) *y++ = static_cast<float>(ternary_digit(x[b].qs[32 + m], n) - 1) * d;
    }
    for (int n = 0; n < 4; ++n) {
      for (int j = 0; j < 4; ++j) *y++ = static_cast<float>(ternary_digit(x[b].qh[j], n) - 1) * d;
    }
  }
}

void dequantize_tq2_0(const BlockTQ2_0* x, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, y += 256) {
    const float d = f16_to_f32(x[b].d);
    for (int e = 0; e < 256; ++e) y[e] = static_cast<float>(crumb(x[b].qs, e) - 1) * d;
  }
}

}  // namespace loom::detail
