// The levels kernels (qdot_levels.h) on x86: a weight block is decoded once per call
// to int16 levels, then each activation row's exact sum is vpmaddwd of the levels with
// the row's int8s widened to int16 (|L|·127·2 < 2^31 per pair, and the whole block's
// sum fits int32, qlevels.h). Define LOOM_LEVELS_ZMM to 1 (AVX512BW, 32 levels a
// vector) or 0 (AVX2, 16) before including.
#pragma once

#include <immintrin.h>

#include <cstring>
#include <iterator>
#include <utility>

#include "runtime/cpu/matmul_kernels.h"
#include "runtime/cpu/qdot_levels.h"
#include "runtime/cpu/qlevels.h"

#if LOOM_LEVELS_ZMM
#define LOOM_LEVELS_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")))
#else
#define LOOM_LEVELS_TARGET LOOM_TARGET_AVX2
#endif

namespace loom::cpu::detail {
namespace {

template <int kElements>
LOOM_LEVELS_TARGET LOOM_INLINE int32_t levels_dot(const int16_t* L, const int8_t* q) {
#if LOOM_LEVELS_ZMM
  __m512i acc = _mm512_setzero_si512();
  for (int e = 0; e < kElements; e += 32) {
    const __m512i x = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + e)));
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_loadu_si512(L + e), x));
  }
  // (maskz: the unmasked extract reads an undefined vector GCC 12 warns about)
  const __m256i half = _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xFF, acc, 0),
                                        _mm512_maskz_extracti64x4_epi64(0xFF, acc, 1));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(half), _mm256_extracti128_si256(half, 1));
#else
  __m256i acc = _mm256_setzero_si256();
  for (int e = 0; e < kElements; e += 16) {
    const __m256i x = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + e)));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(L + e)), x));
  }
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
#endif
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// Decoding in SIMD where it is a few shuffles (the nibble types, the 2- and 3-bit K
// types); the codebook types look their grids up in scalar code (levels::decode).
template <class Block>
LOOM_LEVELS_TARGET LOOM_INLINE void decode_x86(const Block& b, LevelBlock& o) {
  levels::decode(b, o);
}

// F16C's conversion: exact, as core's f16_to_f32, without its call and branches per block.
LOOM_LEVELS_TARGET LOOM_INLINE float half_to_f32(uint16_t h) { return _cvtsh_ss(h); }

LOOM_LEVELS_TARGET LOOM_INLINE void store_levels(__m128i lo, __m128i hi, int16_t* L) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(L), _mm256_cvtepi8_epi16(lo));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(L + 16), _mm256_cvtepi8_epi16(hi));
}
// The 32 nibbles of 16 bytes: elements 0..15 low, 16..31 high.
LOOM_LEVELS_TARGET LOOM_INLINE void split_nibbles(const uint8_t* qs, __m128i* lo, __m128i* hi) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  *lo = _mm_and_si128(q, m);
  *hi = _mm_and_si128(_mm_srli_epi16(q, 4), m);
}
// Byte i = 0x10 where bit i of `bits` is set (Q5_0/Q5_1's fifth bits).
LOOM_LEVELS_TARGET LOOM_INLINE __m128i fifth_bits(uint32_t bits) {
  __m128i v = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(bits)),
                               _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
  const __m128i bit = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  v = _mm_cmpeq_epi8(_mm_and_si128(v, bit), bit);
  return _mm_and_si128(v, _mm_set1_epi8(0x10));
}
LOOM_LEVELS_TARGET LOOM_INLINE void decode_nibble_values(const uint8_t* qs, const int8_t* values, int16_t* L) {
  __m128i lo, hi;
  split_nibbles(qs, &lo, &hi);
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(values));
  store_levels(_mm_shuffle_epi8(table, lo), _mm_shuffle_epi8(table, hi), L);
}
LOOM_LEVELS_TARGET LOOM_INLINE void decode_q5_levels(const uint8_t* qs, const uint8_t* qh, int offset, int16_t* L) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  __m128i lo, hi;
  split_nibbles(qs, &lo, &hi);
  const __m128i off = _mm_set1_epi8(static_cast<char>(offset));
  store_levels(_mm_sub_epi8(_mm_or_si128(lo, fifth_bits(h & 0xFFFF)), off),
               _mm_sub_epi8(_mm_or_si128(hi, fifth_bits(h >> 16)), off), L);
}

LOOM_LEVELS_TARGET LOOM_INLINE void decode_x86(const BlockQ4_1& b, LevelBlock& o) {
  o.d = half_to_f32(b.d);
  o.dm = half_to_f32(b.m);
  o.min[0] = 1;
  __m128i lo, hi;
  split_nibbles(b.qs, &lo, &hi);
  store_levels(lo, hi, o.L);
}
LOOM_LEVELS_TARGET LOOM_INLINE void decode_x86(const BlockQ5_0& b, LevelBlock& o) {
  o.d = half_to_f32(b.d);
  decode_q5_levels(b.qs, b.qh, 16, o.L);
}
LOOM_LEVELS_TARGET LOOM_INLINE void decode_x86(const BlockQ5_1& b, LevelBlock& o) {
  o.d = half_to_f32(b.d);
  o.dm = half_to_f32(b.m);
  o.min[0] = 1;
  decode_q5_levels(b.qs, b.qh, 0, o.L);
}
LOOM_LEVELS_TARGET LOOM_INLINE void decode_x86(const BlockIQ4_NL& b, LevelBlock& o) {
  o.d = half_to_f32(b.d);
  decode_nibble_values(b.qs, kIQ4Values, o.L);
}
LOOM_LEVELS_TARGET LOOM_INLINE void decode_x86(const BlockMXFP4& b, LevelBlock& o) {
  o.d = mxfp4_half_scale(b.e);
  decode_nibble_values(b.qs, kMXFP4Values, o.L);
}
LOOM_LEVELS_TARGET LOOM_INLINE void decode_x86(const BlockIQ4_XS& b, LevelBlock& o) {
  o.d = half_to_f32(b.d);
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4Values));
  for (int s = 0; s < 8; ++s) {
    __m128i lo, hi;
    split_nibbles(b.qs + 16 * s, &lo, &hi);
    const __m256i scale = _mm256_set1_epi16(static_cast<int16_t>(iq4_xs_scale(b, s)));
    int16_t* L = o.L + 32 * s;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(L),
                        _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm_shuffle_epi8(table, lo)), scale));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(L + 16),
                        _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm_shuffle_epi8(table, hi)), scale));
  }
}
// The 2-bit fields of Q2_K/Q3_K/TQ2_0 (element 128h + 32j + l: bits 2j of qs[32h + l]),
// minus `offset` where hmask's bit 4h + j is clear (Q3_K) or always (TQ2_0: 1), times
// the scale of each 16 (scales[e / 16], or 1).
LOOM_LEVELS_TARGET LOOM_INLINE void decode_crumbs(const uint8_t* qs, const uint8_t* hmask, int offset,
                                                  const int* scales, int16_t* L) {
  const __m256i three = _mm256_set1_epi8(3);
  const __m256i hm = hmask ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hmask)) : _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * h));
    for (int j = 0; j < 4; ++j) {
      __m256i c = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), three);
      if (hmask) {
        const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (4 * h + j)));
        const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), _mm256_setzero_si256());
        c = _mm256_sub_epi8(c, _mm256_and_si256(clear, _mm256_set1_epi8(static_cast<char>(offset))));
      } else if (offset) {
        c = _mm256_sub_epi8(c, _mm256_set1_epi8(static_cast<char>(offset)));
      }
      const int e = 128 * h + 32 * j;
      __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(c));
      __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(c, 1));
      if (scales) {
        lo = _mm256_mullo_epi16(lo, _mm256_set1_epi16(static_cast<int16_t>(scales[e / 16])));
        hi = _mm256_mullo_epi16(hi, _mm256_set1_epi16(static_cast<int16_t>(scales[e / 16 + 1])));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(L + e), lo);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(L + e + 16), hi);
    }
  }
}
LOOM_LEVELS_TARGET LOOM_INLINE void decode_x86(const BlockQ2_K& b, LevelBlock& o) {
  o.d = half_to_f32(b.d);
  o.dm = -half_to_f32(b.dmin);
  int sc[16];
  for (int s = 0; s < 16; ++s) {
    sc[s] = b.scales[s] & 0xF;
    o.min[s] = static_cast<int16_t>(b.scales[s] >> 4);
  }
  decode_crumbs(b.qs, nullptr, 0, sc, o.L);
}
LOOM_LEVELS_TARGET LOOM_INLINE void decode_x86(const BlockQ3_K& b, LevelBlock& o) {
  o.d = half_to_f32(b.d);
  int sc[16];
  for (int s = 0; s < 16; ++s) sc[s] = q3_k_scale(b.scales, s);
  decode_crumbs(b.qs, b.hmask, 4, sc, o.L);
}
LOOM_LEVELS_TARGET LOOM_INLINE void decode_x86(const BlockTQ2_0& b, LevelBlock& o) {
  o.d = half_to_f32(b.d);
  decode_crumbs(b.qs, nullptr, 1, nullptr, o.L);
}

template <DType dt>
LOOM_LEVELS_TARGET void qdot_levels_x86(const QdotArgs& a) {
  using T = LevelTraits<dt>;
  using Act = LevelAct<dt>;
  alignas(64) LevelBlock w;
  for (int64_t n = 0; n < a.outputs; ++n) {
    const auto* row = qdot_weight_row<typename T::Block>(a, n);
    float acc[kQTileRows] = {};
    for (int64_t b = 0; b < a.blocks; ++b) {
      decode_x86(row[b], w);
      for (int r = 0; r < a.m; ++r) {
        const Act& x = qdot_act_row<Act>(a, r)[b];
        acc[r] = qdot_step(acc[r], w.d * x.d, levels_dot<T::elements>(w.L, x.qs));
        if constexpr (T::min_elements > 0) acc[r] = qdot_step(acc[r], w.dm * x.d, level_min_sum<dt>(w, x));
      }
    }
    for (int r = 0; r < a.m; ++r) a.y[r * a.ldy + n] = qdot_finish(acc[r], a.bias, n);
  }
}

template <size_t... I>
QdotFn pick_levels_x86(DType dt, std::index_sequence<I...>) {
  QdotFn fn = nullptr;
  ((dt == kLevelTypes[I] ? (fn = qdot_levels_x86<kLevelTypes[I]>, 0) : 0), ...);
  return fn;
}

}  // namespace
}  // namespace loom::cpu::detail
