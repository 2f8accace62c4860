// The block types without a kernel of their own (Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K,
// Q3_K, IQ4_XS, the IQ2/IQ3/IQ1 codebook types, TQ1_0, TQ2_0) as exact integers: each
// weight is w = d·L + dm·(the block's or sub-block's min weight), with L an int16 that
// already includes every integer sub-block scale (and the codebook's values and signs),
// and d a power of two times the stored f16/E8M0 scale. So one integer dot product
// against the int8 activations, Σ L·q, is exact, and the kernels combine per block
//   acc = fma(d·d_x, Σ L·q, acc)                       every type
//   acc = fma(dm·d_x, Σ_j min_j·Σ_{sub-block j} q, acc)  Q4_1, Q5_1 (min_j = 1), Q2_K
// |L| ≤ 31·127·... at most 4064 (IQ4_XS), so Σ L·q over 256 elements fits int32.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "loom/core/quantize.h"
#include "loom/core/quantize_iq_grids.h"

namespace loom::cpu::detail {

struct LevelBlock {
  float d = 0;   // w = d·L …
  float dm = 0;  // … + dm·min_j (Q4_1/Q5_1: m; Q2_K: −dmin)
  int16_t L[256];
  int16_t min[16];  // per sub-block of min_elements (Q4_1/Q5_1: one of 32; Q2_K: 16 of 16)
};

template <DType dt>
struct LevelTraits;
// elements: per block; min_elements: 0 where the type has no min term.
#define LOOM_LEVEL_TRAITS(DT, BLOCK, ELEMENTS, MIN_ELEMENTS) \
  template <>                                               \
  struct LevelTraits<DT> {                                  \
    using Block = BLOCK;                                    \
    static constexpr int elements = ELEMENTS;               \
    static constexpr int min_elements = MIN_ELEMENTS;       \
  };
LOOM_LEVEL_TRAITS(DType::kQ4_1, BlockQ4_1, 32, 32)
LOOM_LEVEL_TRAITS(DType::kQ5_0, BlockQ5_0, 32, 0)
LOOM_LEVEL_TRAITS(DType::kQ5_1, BlockQ5_1, 32, 32)
LOOM_LEVEL_TRAITS(DType::kIQ4_NL, BlockIQ4_NL, 32, 0)
LOOM_LEVEL_TRAITS(DType::kMXFP4, BlockMXFP4, 32, 0)
LOOM_LEVEL_TRAITS(DType::kQ2_K, BlockQ2_K, 256, 16)
LOOM_LEVEL_TRAITS(DType::kQ3_K, BlockQ3_K, 256, 0)
LOOM_LEVEL_TRAITS(DType::kIQ4_XS, BlockIQ4_XS, 256, 0)
LOOM_LEVEL_TRAITS(DType::kIQ2_XXS, BlockIQ2_XXS, 256, 0)
LOOM_LEVEL_TRAITS(DType::kIQ2_XS, BlockIQ2_XS, 256, 0)
LOOM_LEVEL_TRAITS(DType::kIQ2_S, BlockIQ2_S, 256, 0)
LOOM_LEVEL_TRAITS(DType::kIQ3_XXS, BlockIQ3_XXS, 256, 0)
LOOM_LEVEL_TRAITS(DType::kIQ3_S, BlockIQ3_S, 256, 0)
LOOM_LEVEL_TRAITS(DType::kIQ1_S, BlockIQ1_S, 256, 0)
LOOM_LEVEL_TRAITS(DType::kIQ1_M, BlockIQ1_M, 256, 0)
LOOM_LEVEL_TRAITS(DType::kTQ1_0, BlockTQ1_0, 256, 0)
LOOM_LEVEL_TRAITS(DType::kTQ2_0, BlockTQ2_0, 256, 0)
#undef LOOM_LEVEL_TRAITS

// Every type above, for tables and tests.
inline constexpr DType kLevelTypes[] = {
    DType::kQ4_1,    DType::kQ5_0,   DType::kQ5_1,  DType::kIQ4_NL,  DType::kMXFP4, DType::kQ2_K,
    DType::kQ3_K,    DType::kIQ4_XS, DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS,
    DType::kIQ3_S,   DType::kIQ1_S,  DType::kIQ1_M, DType::kTQ1_0,   DType::kTQ2_0,
};
constexpr bool is_level_type(DType dt) {
  for (DType t : kLevelTypes) {
    if (t == dt) return true;
  }
  return false;
}

namespace levels {

// Element 128h + 32j + l: bits 2j of qs[32h + l] (Q2_K, Q3_K, TQ2_0).
inline int crumb(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }
inline int sign_of(uint8_t signs, int j) { return (signs >> j) & 1 ? -1 : 1; }

inline void decode(const BlockQ4_1& b, LevelBlock& o) {
  o.d = f16_to_f32(b.d);
  o.dm = f16_to_f32(b.m);
  o.min[0] = 1;
  for (int j = 0; j < 16; ++j) {
    o.L[j] = static_cast<int16_t>(b.qs[j] & 0xF);
    o.L[j + 16] = static_cast<int16_t>(b.qs[j] >> 4);
  }
}

inline void decode_q5(const uint8_t* qs, const uint8_t* qh_bytes, int offset, int16_t* L) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    L[j] = static_cast<int16_t>(((qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - offset);
    L[j + 16] = static_cast<int16_t>(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - offset);
  }
}
inline void decode(const BlockQ5_0& b, LevelBlock& o) {
  o.d = f16_to_f32(b.d);
  decode_q5(b.qs, b.qh, 16, o.L);
}
inline void decode(const BlockQ5_1& b, LevelBlock& o) {
  o.d = f16_to_f32(b.d);
  o.dm = f16_to_f32(b.m);
  o.min[0] = 1;
  decode_q5(b.qs, b.qh, 0, o.L);
}

inline void decode_nibbles(const uint8_t* qs, const int8_t* values, int scale, int16_t* L) {
  for (int j = 0; j < 16; ++j) {
    L[j] = static_cast<int16_t>(scale * values[qs[j] & 0xF]);
    L[j + 16] = static_cast<int16_t>(scale * values[qs[j] >> 4]);
  }
}
inline void decode(const BlockIQ4_NL& b, LevelBlock& o) {
  o.d = f16_to_f32(b.d);
  decode_nibbles(b.qs, kIQ4Values, 1, o.L);
}
inline void decode(const BlockMXFP4& b, LevelBlock& o) {
  o.d = mxfp4_half_scale(b.e);
  decode_nibbles(b.qs, kMXFP4Values, 1, o.L);
}
inline void decode(const BlockIQ4_XS& b, LevelBlock& o) {
  o.d = f16_to_f32(b.d);
  for (int s = 0; s < 8; ++s) decode_nibbles(b.qs + 16 * s, kIQ4Values, iq4_xs_scale(b, s), o.L + 32 * s);
}

inline void decode(const BlockQ2_K& b, LevelBlock& o) {
  o.d = f16_to_f32(b.d);
  o.dm = -f16_to_f32(b.dmin);
  for (int s = 0; s < 16; ++s) o.min[s] = static_cast<int16_t>(b.scales[s] >> 4);
  for (int e = 0; e < 256; ++e) o.L[e] = static_cast<int16_t>((b.scales[e / 16] & 0xF) * crumb(b.qs, e));
}
inline void decode(const BlockQ3_K& b, LevelBlock& o) {
  o.d = f16_to_f32(b.d);
  int sc[16];
  for (int s = 0; s < 16; ++s) sc[s] = q3_k_scale(b.scales, s);
  for (int e = 0; e < 256; ++e) {
    const int hbit = (b.hmask[e % 32] >> (4 * (e / 128) + (e % 128) / 32)) & 1;
    o.L[e] = static_cast<int16_t>(sc[e / 16] * (crumb(b.qs, e) - (hbit ? 0 : 4)));
  }
}

// IQ2_XXS/XS/S: w = d·(0.5 + s)·0.25·grid·sign = (d/8)·(2s + 1)·grid·sign.
inline void put8(const uint8_t* grid, uint8_t signs, int scale, int16_t* L) {
  for (int j = 0; j < 8; ++j) L[j] = static_cast<int16_t>(scale * grid[j] * sign_of(signs, j));
}
inline void decode(const BlockIQ2_XXS& b, LevelBlock& o) {
  o.d = f16_to_f32(b.d) * 0.125f;
  for (int s = 0; s < 8; ++s) {
    const uint8_t* idx = reinterpret_cast<const uint8_t*>(b.qs + 4 * s);
    uint32_t aux;
    std::memcpy(&aux, b.qs + 4 * s + 2, 4);
    const int scale = 2 * static_cast<int>(aux >> 28) + 1;
    for (int l = 0; l < 4; ++l) put8(loom::iq2xxs_grid[idx[l]], iq_sign_byte(aux >> (7 * l)), scale, o.L + 32 * s + 8 * l);
  }
}
inline void decode(const BlockIQ2_XS& b, LevelBlock& o) {
  o.d = f16_to_f32(b.d) * 0.125f;
  for (int s = 0; s < 8; ++s) {
    for (int l = 0; l < 4; ++l) {
      const uint16_t q = b.qs[4 * s + l];
      const int scale = 2 * ((b.scales[s] >> (4 * (l / 2))) & 0xF) + 1;
      put8(loom::iq2xs_grid[q & 511], iq_sign_byte(q >> 9), scale, o.L + 32 * s + 8 * l);
    }
  }
}
inline void decode(const BlockIQ2_S& b, LevelBlock& o) {
  o.d = f16_to_f32(b.d) * 0.125f;
  for (int s = 0; s < 8; ++s) {
    for (int l = 0; l < 4; ++l) {
      const int index = b.qs[4 * s + l] | (((b.qh[s] >> (2 * l)) & 3) << 8);
      const int scale = 2 * ((b.scales[s] >> (4 * (l / 2))) & 0xF) + 1;
      put8(loom::iq2s_grid[index], b.qs[32 + 4 * s + l], scale, o.L + 32 * s + 8 * l);
    }
  }
}
// IQ3: groups of 4 from the grid, signs per 8.
inline void put4x2(const uint8_t* g1, const uint8_t* g2, uint8_t signs, int scale, int16_t* L) {
  for (int j = 0; j < 4; ++j) {
    L[j] = static_cast<int16_t>(scale * g1[j] * sign_of(signs, j));
    L[j + 4] = static_cast<int16_t>(scale * g2[j] * sign_of(signs, j + 4));
  }
}
inline void decode(const BlockIQ3_XXS& b, LevelBlock& o) {  // (d/4)·(2s + 1)
  o.d = f16_to_f32(b.d) * 0.25f;
  for (int s = 0; s < 8; ++s) {
    uint32_t aux;
    std::memcpy(&aux, b.qs + 64 + 4 * s, 4);
    const int scale = 2 * static_cast<int>(aux >> 28) + 1;
    const uint8_t* idx = b.qs + 8 * s;
    for (int l = 0; l < 4; ++l) {
      put4x2(loom::iq3xxs_grid[idx[2 * l]], loom::iq3xxs_grid[idx[2 * l + 1]], iq_sign_byte(aux >> (7 * l)), scale,
             o.L + 32 * s + 8 * l);
    }
  }
}
inline void decode(const BlockIQ3_S& b, LevelBlock& o) {  // d·(2s + 1)
  o.d = f16_to_f32(b.d);
  for (int s = 0; s < 8; ++s) {
    const int scale = 2 * ((b.scales[s / 2] >> (4 * (s % 2))) & 0xF) + 1;
    const uint8_t* qs = b.qs + 8 * s;
    for (int l = 0; l < 4; ++l) {
      const int i1 = qs[2 * l] | (((b.qh[s] >> (2 * l)) & 1) << 8);
      const int i2 = qs[2 * l + 1] | (((b.qh[s] >> (2 * l + 1)) & 1) << 8);
      put4x2(loom::iq3s_grid[i1], loom::iq3s_grid[i2], b.signs[4 * s + l], scale, o.L + 32 * s + 8 * l);
    }
  }
}
// IQ1: w = d·(2s + 1)·(grid ± 1/8) = (d/8)·(2s + 1)·(8·grid ± 1).
inline void put_iq1(const int8_t* grid, bool negative_shift, int scale, int16_t* L) {
  const int shift = negative_shift ? -1 : 1;
  for (int j = 0; j < 8; ++j) L[j] = static_cast<int16_t>(scale * (8 * grid[j] + shift));
}
inline void decode(const BlockIQ1_S& b, LevelBlock& o) {
  o.d = f16_to_f32(b.d) * 0.125f;
  for (int s = 0; s < 8; ++s) {
    const uint16_t qh = b.qh[s];
    const int scale = 2 * ((qh >> 12) & 7) + 1;
    for (int l = 0; l < 4; ++l) {
      put_iq1(loom::iq1s_grid[b.qs[4 * s + l] | (((qh >> (3 * l)) & 7) << 8)], qh & 0x8000, scale,
              o.L + 32 * s + 8 * l);
    }
  }
}
inline void decode(const BlockIQ1_M& b, LevelBlock& o) {
  o.d = f16_to_f32(iq1_m_scale_bits(b)) * 0.125f;
  uint16_t sc[4];
  std::memcpy(sc, b.scales, 8);
  for (int s = 0; s < 8; ++s) {
    for (int l = 0; l < 4; ++l) {
      const int scale = 2 * ((sc[s / 2] >> (6 * (s % 2) + 3 * (l / 2))) & 7) + 1;
      const uint8_t h = b.qh[2 * s + l / 2] >> (4 * (l % 2));
      put_iq1(loom::iq1s_grid[b.qs[4 * s + l] | ((h & 7) << 8)], h & 8, scale, o.L + 32 * s + 8 * l);
    }
  }
}

inline int ternary_digit(uint8_t q, int n) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  return (static_cast<uint16_t>(static_cast<uint8_t>(q * kPow3[n])) * 3) >> 8;
}
inline void decode(const BlockTQ1_0& b, LevelBlock& o) {
  o.d = f16_to_f32(b.d);
  int16_t* L = o.L;
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < 32; ++m) *L++ = static_cast<int16_t>(ternary_digit(b.qs[m], n) - 1);
  }
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < 16; ++m) *L++ = static_cast<int16_t>(ternary_digit(b.qs[32 + m], n) - 1);
  }
  for (int n = 0; n < 4; ++n) {
    for (int j = 0; j < 4; ++j) *L++ = static_cast<int16_t>(ternary_digit(b.qh[j], n) - 1);
  }
}
inline void decode(const BlockTQ2_0& b, LevelBlock& o) {
  o.d = f16_to_f32(b.d);
  for (int e = 0; e < 256; ++e) o.L[e] = static_cast<int16_t>(crumb(b.qs, e) - 1);
}

}  // namespace levels

// The activation block a type pairs with, and its sub-block sums of min_elements.
template <DType dt>
using LevelAct = std::conditional_t<LevelTraits<dt>::elements == 32, ActBlockQ8x32, ActBlockQ8K>;

template <DType dt>
int32_t level_min_sum(const LevelBlock& w, const LevelAct<dt>& x) {
  if constexpr (LevelTraits<dt>::elements == 32) {
    int32_t s = 0;
    for (int8_t q : x.qs) s += q;
    return w.min[0] * s;
  } else {
    int32_t s = 0;
    for (int j = 0; j < 16; ++j) s += w.min[j] * x.bsums[j];
    return s;
  }
}

}  // namespace loom::cpu::detail
