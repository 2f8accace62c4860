// The tiled GEMM over quantized weights that the AMX-INT8 (qgemm_amx.cc) and the
// AVX512-VNNI (qgemm_avx512vnni.cc) batched paths share: both produce, per 16
// outputs × 16 activation rows, each block's (or sub-block's) exact int32 sums
// C[n][m] = Σ_k W[n][k]·X[m][k], and this file does everything around those
// products, the same for both:
//  - weights: per chunk of outputs, unpacked into a buffer that stays in L2 while
//    every row tile passes, 16 rows of levels per 32 elements (Q8_0 as stored,
//    Q4_0 as q − 8, Q6_K as q − 32 so a sub-block's sum is already dot − 32·bsum,
//    Q4_K/Q5_K unsigned), each group's 16 × 32 bytes contiguous;
//  - activations: rearranged once per call into 4-byte groups (row k/4, column m)
//    per tile of 16 rows, with each row's block scales (and sums);
//  - each block's sums combine in AVX-512, 16 rows per output vector, in the row
//    kernels' order (qdot_kernels.h): integer Σ_j sc_j·isum_j for the K types, then
//    acc = fma(d_w·d_x, isum, acc) (and the min term), acc + bias at the end.
// So either engine gives the row kernels' bits.
//
// An engine E supplies the products (it sees A = 16 weight rows ws bytes apart, B
// = one activation group tile):
//   E::biased(kind)          levels stored as u8 = s8 + 128 (then the activation
//                            tile carries −128·Σx per row and unit to start from)
//   E::Scope scope(k)        around a chunk's products (k = 32 or 16 elements)
//   E::dot<k>(w, ws, x, corr, out)   out[16n + m] = C[n][m]; corr: 16 × int32 or null
//                            (corr[m] + Σ_k (w[n][k] + 128)·x[m][k] when biased)
//   E::dot4<k>(w[4], ws, x[4], corr[4], out)   four of them, at out + 256·i
// The includer defines LOOM_QGEMM_TARGET (its ISA attribute) first.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "loom/core/quantize.h"
#include "runtime/cpu/matmul_kernels.h"
#include "runtime/cpu/share_chunks.h"

namespace loom::cpu::detail {
namespace {

constexpr int kTile = 16;                        // outputs and activation rows per tile
constexpr size_t kWeightChunkBytes = 256 << 10;  // unpacked weight levels per chunk (L2)
constexpr size_t kATile = kTile * 32;            // bytes of one group's 32 elements

// Stores the compiler made must land before tile loads read them (the AMX tile
// intrinsics are asm without a memory clobber).
inline void compiler_barrier() { __asm__ volatile("" ::: "memory"); }

enum class Kind { kQ8x32, kQ4_K, kQ6_K };  // Q8_0/Q4_0 | Q4_K/Q5_K | Q6_K

inline Kind kind_of(DType dt) {
  switch (dt) {
    case DType::kQ4_K:
    case DType::kQ5_K: return Kind::kQ4_K;
    case DType::kQ6_K: return Kind::kQ6_K;
    default: return Kind::kQ8x32;
  }
}

// Units: the element runs one product covers, and so one correction vector:
// Q8x32 one per block, Q6_K sixteen (16 elements each). Q4_K is never biased.
inline int64_t units_per_block(Kind kind) { return kind == Kind::kQ6_K ? 16 : 1; }

// One tile of 16 activation rows: the int8 values in B layout (byte (k/4)·64 +
// 4m + k%4), then per block the 16 rows' scales, then (K types with mins) per
// block and sub-block j the 16 rows' Σ of the sub-block's 32 values, as f32
// (exact: |Σ| ≤ 32·127), then (biased engines) per unit the 16 rows' −128·Σx,
// where a product of levels + 128 starts so that it ends at Σ w·x.
struct ActLayout {
  int64_t K = 0, blocks = 0;
  bool sums = false;
  int64_t units = 0;  // correction vectors, 0 when the weights are not biased
  size_t qs_bytes() const { return static_cast<size_t>(K) * kTile; }
  size_t dx_offset() const { return qs_bytes(); }
  size_t sums_offset() const { return dx_offset() + static_cast<size_t>(blocks) * kTile * sizeof(float); }
  size_t corr_offset() const {
    return sums_offset() + (sums ? static_cast<size_t>(blocks) * 8 * kTile * sizeof(float) : 0);
  }
  size_t tile_bytes() const {
    const size_t end = corr_offset() + static_cast<size_t>(units) * kTile * sizeof(int32_t);
    return (end + 63) & ~size_t{63};
  }
};

inline void build_act_tile(const uint8_t* act, size_t act_row_bytes, int rows, bool k_types, const ActLayout& L,
                           uint8_t* dst) {
  std::memset(dst, 0, L.tile_bytes());
  float* dx = reinterpret_cast<float*>(dst + L.dx_offset());
  float* sums = reinterpret_cast<float*>(dst + L.sums_offset());
  int32_t* corr = reinterpret_cast<int32_t*>(dst + L.corr_offset());
  const int64_t per_block = k_types ? 256 : 32;
  const int64_t per_unit = L.units > 0 ? per_block * L.blocks / L.units : per_block;
  for (int m = 0; m < rows; ++m) {
    const uint8_t* row = act + static_cast<size_t>(m) * act_row_bytes;
    for (int64_t b = 0; b < L.blocks; ++b) {
      const int8_t* qs;
      if (k_types) {
        const ActBlockQ8K& x = reinterpret_cast<const ActBlockQ8K*>(row)[b];
        qs = x.qs;
        dx[b * kTile + m] = x.d;
        if (L.sums) {
          for (int j = 0; j < 8; ++j) {
            sums[(b * 8 + j) * kTile + m] = static_cast<float>(x.bsums[2 * j] + x.bsums[2 * j + 1]);
          }
        }
      } else {
        const ActBlockQ8x32& x = reinterpret_cast<const ActBlockQ8x32*>(row)[b];
        qs = x.qs;
        dx[b * kTile + m] = x.d;
      }
      uint8_t* out = dst + static_cast<size_t>(b * per_block / 4) * 64 + 4 * static_cast<size_t>(m);
      for (int64_t g = 0; g < per_block / 4; ++g) std::memcpy(out + g * 64, qs + 4 * g, 4);
      if (L.units > 0) {
        for (int64_t u0 = 0; u0 < per_block; u0 += per_unit) {
          int32_t s = 0;
          for (int64_t k = u0; k < u0 + per_unit; ++k) s += qs[k];
          corr[(b * per_block + u0) / per_unit * kTile + m] = -128 * s;
        }
      }
    }
  }
}

// Per chunk of outputs, in groups of 16 (the last zero-padded): signed levels,
// per group and 32 elements k0..k0+31 one 16 × 32-byte A tile (row r at
// 32·r), and the f32/int scales per block.
struct WeightChunk {
  std::vector<int8_t> levels;
  std::vector<float> d, dmin, mins;  // [group][block][16]; mins [group][block][16 n][8 j]
  std::vector<float> sc;             // Q4_K, Q5_K: [group][block][16 n][8 sub-blocks], small integers
  std::vector<int32_t> sc6;          // Q6_K: [group][block][16 n][16 sub-blocks]
  std::vector<uint16_t> d16, dmin16;  // d, dmin as stored (f16), converted 16 at a time
};

// Each unpacker writes levels ^ flip: flip 0x80 stores s8 levels as u8 + 128.
LOOM_QGEMM_TARGET LOOM_INLINE void unpack_q8_0(const BlockQ8_0& w, int8_t* dst, __m256i flip) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                      _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs)), flip));
}

LOOM_QGEMM_TARGET LOOM_INLINE void unpack_q4_0(const BlockQ4_0& w, int8_t* dst, __m256i flip) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.qs));
  const __m128i low4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), low4), _mm_and_si128(v, low4));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                      _mm256_xor_si256(_mm256_sub_epi8(q, _mm256_set_m128i(eight, eight)), flip));
}

// Sub-block j (32 levels) to dst + j·step.
LOOM_QGEMM_TARGET LOOM_INLINE void unpack_q4_K(const uint8_t* qs, const uint8_t* qh, int8_t* dst, size_t step,
                                               __m256i flip) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
  const __m256i h = qh ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh)) : _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
    for (int half = 0; half < 2; ++half) {
      const int j = 2 * c + half;
      __m256i q = _mm256_and_si256(half ? _mm256_srli_epi16(v, 4) : v, low4);
      // bit j of qh[l] is bit 4 of sub-block j's element l (Q5_K)
      q = _mm256_or_si256(q, _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(h, _mm_cvtsi32_si128(j)), 4), bit4));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + step * j), _mm256_xor_si256(q, flip));
    }
  }
}

// Elements 32c..32c+31 to dst + c·step.
LOOM_QGEMM_TARGET LOOM_INLINE void unpack_q6_K(const BlockQ6_K& w, int8_t* dst, size_t step, __m256i flip) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(3), bias = _mm256_set1_epi8(32);
  for (int h = 0; h < 2; ++h) {
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.ql + 64 * h));
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.ql + 64 * h + 32));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qh + 32 * h));
    const __m256i lows[4] = {_mm256_and_si256(l0, low4), _mm256_and_si256(l1, low4),
                             _mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                             _mm256_and_si256(_mm256_srli_epi16(l1, 4), low4)};
    for (int g = 0; g < 4; ++g) {
      const __m256i top = _mm256_and_si256(_mm256_srl_epi16(hi, _mm_cvtsi32_si128(2 * g)), low2);
      const __m256i q = _mm256_or_si256(lows[g], _mm256_slli_epi16(top, 4));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + step * (4 * h + g)),
                          _mm256_xor_si256(_mm256_sub_epi8(q, bias), flip));
    }
  }
}

template <DType dt>
constexpr size_t pack_block_bytes() {
  return dt == DType::kQ8_0   ? sizeof(BlockQ8_0)
         : dt == DType::kQ4_0 ? sizeof(BlockQ4_0)
         : dt == DType::kQ4_K ? sizeof(BlockQ4_K)
         : dt == DType::kQ5_K ? sizeof(BlockQ5_K)
                              : sizeof(BlockQ6_K);
}

// One weight row's blocks into its group's tiles (lv: the row's first tile).
template <DType dt>
LOOM_QGEMM_TARGET void pack_row(const uint8_t* row, int64_t blocks, int8_t* lv, size_t at, __m256i flip,
                                WeightChunk& c) {
  // Rows stream from memory, 16 at a time: ask for each a few blocks ahead.
  constexpr size_t block_bytes = dt == DType::kQ8_0   ? sizeof(BlockQ8_0)
                                 : dt == DType::kQ4_0 ? sizeof(BlockQ4_0)
                                 : dt == DType::kQ4_K ? sizeof(BlockQ4_K)
                                 : dt == DType::kQ5_K ? sizeof(BlockQ5_K)
                                                      : sizeof(BlockQ6_K);
  constexpr size_t ahead = 1024;
  for (int64_t b = 0; b < blocks; ++b, at += kTile) {
    const uint8_t* block = row + static_cast<size_t>(b) * block_bytes;
    if constexpr (block_bytes >= 64) {
      for (size_t off = 0; off < block_bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(block) + ahead + off, _MM_HINT_T0);
    } else if ((static_cast<size_t>(b) * block_bytes) % 64 < block_bytes) {
      _mm_prefetch(reinterpret_cast<const char*>(block) + ahead, _MM_HINT_T0);
    }
    if constexpr (dt == DType::kQ8_0) {
      const BlockQ8_0& x = *reinterpret_cast<const BlockQ8_0*>(block);
      c.d16[at] = x.d;
      unpack_q8_0(x, lv + kATile * b, flip);
    } else if constexpr (dt == DType::kQ4_0) {
      const BlockQ4_0& x = *reinterpret_cast<const BlockQ4_0*>(block);
      c.d16[at] = x.d;
      unpack_q4_0(x, lv + kATile * b, flip);
    } else if constexpr (dt == DType::kQ4_K || dt == DType::kQ5_K) {
      const uint8_t *scales, *qs, *qh = nullptr;
      if constexpr (dt == DType::kQ4_K) {
        const BlockQ4_K& x = *reinterpret_cast<const BlockQ4_K*>(block);
        scales = x.scales, qs = x.qs, c.d16[at] = x.d, c.dmin16[at] = x.dmin;
      } else {
        const BlockQ5_K& x = *reinterpret_cast<const BlockQ5_K*>(block);
        scales = x.scales, qs = x.qs, qh = x.qh, c.d16[at] = x.d, c.dmin16[at] = x.dmin;
      }
      for (int j = 0; j < 8; ++j) {
        uint8_t s, m;
        unpack_scale_min_k4(j, scales, &s, &m);
        c.sc[at * 8 + j] = s;
        c.mins[at * 8 + j] = m;
      }
      unpack_q4_K(qs, qh, lv + 8 * kATile * b, kATile, flip);
    } else {
      const BlockQ6_K& x = *reinterpret_cast<const BlockQ6_K*>(block);
      c.d16[at] = x.d;
      for (int s = 0; s < 16; ++s) c.sc6[at * 16 + s] = x.scales[s];
      unpack_q6_K(x, lv + 8 * kATile * b, kATile, flip);
    }
  }
}

LOOM_QGEMM_TARGET void f16_to_f32_x16(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
}

// Fills `c` for outputs [n0, n1); `biased`: levels as u8 = s8 + 128.
template <DType dt>
LOOM_QGEMM_TARGET void pack_chunk_of(const PackedLinear& w, int64_t n0, int64_t n1, int64_t blocks, bool biased,
                                     WeightChunk& c) {
  const int64_t K = w.in_features();
  const int64_t groups = (n1 - n0 + kTile - 1) / kTile;
  const size_t per_group = static_cast<size_t>(blocks) * kTile;
  const size_t scales = static_cast<size_t>(groups) * per_group;
  const size_t group_bytes = kTile * static_cast<size_t>(K);
  c.levels.resize(static_cast<size_t>(groups) * group_bytes);
  // Padded outputs: level 0 (stored + 128 when biased), scales 0.
  if ((n1 - n0) % kTile != 0) std::memset(c.levels.data() + (groups - 1) * group_bytes, biased ? 0x80 : 0, group_bytes);
  c.d.resize(scales);
  c.d16.assign(scales, 0);
  constexpr bool k4 = dt == DType::kQ4_K || dt == DType::kQ5_K;
  if constexpr (k4) {
    c.sc.assign(scales * 8, 0.0f);
    c.mins.assign(scales * 8, 0.0f);
    c.dmin.resize(scales);
    c.dmin16.assign(scales, 0);
  }
  if constexpr (dt == DType::kQ6_K) c.sc6.assign(scales * 16, 0);
  const __m256i flip = biased ? _mm256_set1_epi8(static_cast<char>(0x80)) : _mm256_setzero_si256();
  // Block by block across a group's 16 rows, so each 512-byte tile is written whole.
  constexpr int64_t step = dt == DType::kQ8_0 || dt == DType::kQ4_0 ? 8 : 1;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t rows = std::min<int64_t>(kTile, n1 - n0 - g * kTile);
    int8_t* base = c.levels.data() + static_cast<size_t>(g) * group_bytes;
    for (int64_t b0 = 0; b0 < blocks; b0 += step) {
      const int64_t nb = std::min(step, blocks - b0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t n = n0 + g * kTile + r;
        pack_row<dt>(w.quant_row(n) + static_cast<size_t>(b0) * pack_block_bytes<dt>(), nb,
                     base + 32 * static_cast<size_t>(r) + static_cast<size_t>(b0) * kATile * (step == 1 ? 8 : 1),
                     static_cast<size_t>(g) * per_group + static_cast<size_t>(b0) * kTile + static_cast<size_t>(r),
                     flip, c);
      }
    }
  }
  f16_to_f32_x16(c.d16.data(), c.d.data(), scales);
  if constexpr (k4) f16_to_f32_x16(c.dmin16.data(), c.dmin.data(), scales);
  compiler_barrier();
}

LOOM_QGEMM_TARGET void pack_chunk(const PackedLinear& w, int64_t n0, int64_t n1, int64_t blocks, bool biased,
                                  WeightChunk& c) {
  switch (w.weight_dtype()) {
    case DType::kQ8_0: pack_chunk_of<DType::kQ8_0>(w, n0, n1, blocks, biased, c); break;
    case DType::kQ4_0: pack_chunk_of<DType::kQ4_0>(w, n0, n1, blocks, biased, c); break;
    case DType::kQ4_K: pack_chunk_of<DType::kQ4_K>(w, n0, n1, blocks, biased, c); break;
    case DType::kQ5_K: pack_chunk_of<DType::kQ5_K>(w, n0, n1, blocks, biased, c); break;
    case DType::kQ6_K: pack_chunk_of<DType::kQ6_K>(w, n0, n1, blocks, biased, c); break;
    default: break;
  }
}

// vcvtdq2ps (exact for the |sums| < 2^24 of a block). The zero-masked form, as
// GCC 12 warns that the plain one's undefined pass-through is uninitialized.
LOOM_QGEMM_TARGET LOOM_INLINE __m512 int_to_f32(__m512i v) { return _mm512_maskz_cvtepi32_ps(0xFFFF, v); }

// acc[n] (16 rows of output n) = fma(d_w[n]·d_x, isum[n], acc[n]).
LOOM_QGEMM_TARGET LOOM_INLINE void combine_q8x32(__m512* acc, const int32_t* cb, const float* dw, const float* dx) {
  const __m512 dxv = _mm512_loadu_ps(dx);
#pragma GCC unroll 16
  for (int n = 0; n < kTile; ++n) {
    const __m512 isum = int_to_f32(_mm512_loadu_si512(cb + 16 * n));
    acc[n] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(dw[n]), dxv), isum, acc[n]);
  }
}

LOOM_QGEMM_TARGET void write_tile(const __m512* acc, int rows, int outputs, const float* bias, float* y,
                                  int64_t ldy) {
  alignas(64) float out[kTile][kTile];
  for (int n = 0; n < kTile; ++n) _mm512_store_ps(out[n], acc[n]);
  for (int m = 0; m < rows; ++m) {
    for (int n = 0; n < outputs; ++n) y[m * ldy + n] = bias ? out[n][m] + bias[n] : out[n][m];
  }
}

// The thread's next chunk of weight rows, pulled into L2 a few lines per step
// of the tile loops, so that unpacking it reads L2 instead of waiting on memory
// (at small M unpacking, which streams the weights, took as long as the products).
struct NextChunk {
  const char* p = nullptr;
  const char* end = nullptr;
  size_t lines_per_step = 0;
  LOOM_QGEMM_TARGET LOOM_INLINE void step() {
    for (size_t i = 0; i < lines_per_step && p < end; ++i, p += 64) _mm_prefetch(p, _MM_HINT_T1);
  }
};

struct TileJob {
  NextChunk* next;
  const int8_t* w;   // the group's A tiles, one per 32 elements (kATile bytes)
  const uint8_t* x;  // activation tile
  const ActLayout* L;
  const WeightChunk* c;
  int64_t group;
  int rows, outputs;
  const float* bias;
  float* y;
  int64_t ldy;
};

// Unit u's correction vector in the activation tile, or null (not biased).
LOOM_QGEMM_TARGET LOOM_INLINE const int32_t* corr_of(const TileJob& j, int64_t u) {
  return j.L->units > 0 ? reinterpret_cast<const int32_t*>(j.x + j.L->corr_offset()) + u * kTile : nullptr;
}

// One pass's tile products (stored at out): Q8_0/Q4_0 four blocks from b, the
// K types every sub-block of block b.
template <class E>
LOOM_QGEMM_TARGET LOOM_INLINE void dots_q8x32(const TileJob& j, int64_t b, int32_t* out) {
  const int8_t* w[4];
  const uint8_t* x[4];
  const int32_t* corr[4];
  for (int i = 0; i < 4; ++i) w[i] = j.w + (b + i) * kATile, x[i] = j.x + (b + i) * 512, corr[i] = corr_of(j, b + i);
  E::template dot4<32>(w, 32, x, corr, out);
}

template <class E>
LOOM_QGEMM_TARGET LOOM_INLINE void dots_q4_K(const TileJob& j, int64_t b, int32_t* out) {
  for (int h = 0; h < 2; ++h) {
    const int8_t* w[4];
    const uint8_t* x[4];
    const int32_t* corr[4] = {};
    for (int i = 0; i < 4; ++i) w[i] = j.w + (8 * b + 4 * h + i) * kATile, x[i] = j.x + (8 * b + 4 * h + i) * 512;
    E::template dot4<32>(w, 32, x, corr, out + 1024 * h);
  }
}

// Sub-block s (16 elements): A at half s % 2 of the group's 32-element tile s / 2.
template <class E>
LOOM_QGEMM_TARGET LOOM_INLINE void dots_q6_K(const TileJob& j, int64_t b, int32_t* out) {
  for (int q = 0; q < 4; ++q) {
    const int8_t* w[4];
    const uint8_t* x[4];
    const int32_t* corr[4];
    for (int i = 0; i < 4; ++i) {
      const int sub = 4 * q + i;
      w[i] = j.w + (8 * b + sub / 2) * kATile + 16 * (sub % 2);
      x[i] = j.x + b * 4096 + 256 * sub;
      corr[i] = corr_of(j, 16 * b + sub);
    }
    E::template dot4<16>(w, 32, x, corr, out + 1024 * q);
  }
}

// The tile products of the next pass are issued before this pass's stored
// tiles combine, so the two overlap (double-buffered stores; AMX runs the
// products beside the AVX-512 combination).
template <class E>
LOOM_QGEMM_TARGET void tile_q8x32(const TileJob& j) {
  const int64_t blocks = j.L->blocks;
  const float* dw = j.c->d.data() + static_cast<size_t>(j.group * blocks) * kTile;
  const float* dx = reinterpret_cast<const float*>(j.x + j.L->dx_offset());
  alignas(64) int32_t cb[2][4 * 256];
  __m512 acc[kTile];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  const int64_t whole = blocks / 4 * 4;
  if (whole > 0) dots_q8x32<E>(j, 0, cb[0]);
  for (int64_t b = 0; b < whole; b += 4) {
    const int32_t* now = cb[(b / 4) & 1];
    if (b + 4 < whole) dots_q8x32<E>(j, b + 4, cb[((b / 4) & 1) ^ 1]);
    j.next->step();
    for (int i = 0; i < 4; ++i) combine_q8x32(acc, now + 256 * i, dw + (b + i) * kTile, dx + (b + i) * kTile);
  }
  for (int64_t b = whole; b < blocks; ++b) {
    E::template dot<32>(j.w + b * kATile, 32, j.x + b * 512, corr_of(j, b), cb[0]);
    combine_q8x32(acc, cb[0], dw + b * kTile, dx + b * kTile);
  }
  write_tile(acc, j.rows, j.outputs, j.bias, j.y, j.ldy);
}

// Σ_s sc_s·isum_s over `subs` sub-blocks of output n as an exact int32: in f32,
// `exact` terms at a time (each partial sum an integer below 2^24, so no f32 step
// rounds: Q4_K 4 terms of ≤ 63·15·127·32, Q5_K 2 of ≤ 63·31·127·32), the
// partial sums added as int32. The f32 FMAs are cheaper
// than vpmulld (two uops on one port).
template <int subs, int exact>
LOOM_QGEMM_TARGET LOOM_INLINE __m512i scaled_sum(const int32_t* cb, const float* sc, int n) {
  static_assert(subs % exact == 0);
  __m512i total = _mm512_setzero_si512();
  for (int s0 = 0; s0 < subs; s0 += exact) {
    __m512 part = _mm512_mul_ps(int_to_f32(_mm512_loadu_si512(cb + 256 * s0 + 16 * n)), _mm512_set1_ps(sc[s0]));
    for (int s = s0 + 1; s < s0 + exact; ++s) {
      part = _mm512_fmadd_ps(int_to_f32(_mm512_loadu_si512(cb + 256 * s + 16 * n)), _mm512_set1_ps(sc[s]), part);
    }
    total = _mm512_add_epi32(total, _mm512_maskz_cvtps_epi32(0xFFFF, part));
  }
  return total;
}

template <class E, int exact>
LOOM_QGEMM_TARGET void tile_q4_K(const TileJob& j) {
  const int64_t blocks = j.L->blocks;
  const size_t first = static_cast<size_t>(j.group * blocks) * kTile;
  const float* dx = reinterpret_cast<const float*>(j.x + j.L->dx_offset());
  const float* xsum = reinterpret_cast<const float*>(j.x + j.L->sums_offset());
  const __m512 sign = _mm512_set1_ps(-0.0f);
  alignas(64) int32_t cbs[2][8 * 256];
  __m512 acc[kTile];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  dots_q4_K<E>(j, 0, cbs[0]);
  for (int64_t b = 0; b < blocks; ++b) {
    if (b + 1 < blocks) dots_q4_K<E>(j, b + 1, cbs[(b + 1) & 1]);
    j.next->step();
    const int32_t* cb = cbs[b & 1];
    const size_t at = first + static_cast<size_t>(b) * kTile;
    const float* sc = j.c->sc.data() + at * 8;
    const float* mn = j.c->mins.data() + at * 8;
    const __m512 dxv = _mm512_loadu_ps(dx + b * kTile);
    const float* xs = xsum + b * 8 * kTile;
#pragma GCC unroll 16
    for (int n = 0; n < kTile; ++n) {
      const __m512i scaled = scaled_sum<8, exact>(cb, sc + 8 * n, n);
      // Σ_j m_j·xsum_j: integers below 2^24 throughout (8·63·32·127), exact in f32
      __m512 mins = _mm512_mul_ps(_mm512_set1_ps(mn[8 * n]), _mm512_loadu_ps(xs));
      for (int s = 1; s < 8; ++s) {
        mins = _mm512_fmadd_ps(_mm512_set1_ps(mn[8 * n + s]), _mm512_loadu_ps(xs + s * kTile), mins);
      }
      const __m512 d = _mm512_mul_ps(_mm512_set1_ps(j.c->d[at + n]), dxv);
      const __m512 dm = _mm512_xor_ps(_mm512_mul_ps(_mm512_set1_ps(j.c->dmin[at + n]), dxv), sign);
      acc[n] = _mm512_fmadd_ps(d, int_to_f32(scaled), acc[n]);
      acc[n] = _mm512_fmadd_ps(dm, mins, acc[n]);
    }
  }
  write_tile(acc, j.rows, j.outputs, j.bias, j.y, j.ldy);
}

template <class E>
LOOM_QGEMM_TARGET void tile_q6_K(const TileJob& j) {
  const int64_t blocks = j.L->blocks;
  const size_t first = static_cast<size_t>(j.group * blocks) * kTile;
  const float* dx = reinterpret_cast<const float*>(j.x + j.L->dx_offset());
  alignas(64) int32_t cbs[2][16 * 256];
  __m512 acc[kTile];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  dots_q6_K<E>(j, 0, cbs[0]);
  for (int64_t b = 0; b < blocks; ++b) {
    if (b + 1 < blocks) dots_q6_K<E>(j, b + 1, cbs[(b + 1) & 1]);
    j.next->step();
    const int32_t* cb = cbs[b & 1];
    const size_t at = first + static_cast<size_t>(b) * kTile;
    const int32_t* sc = j.c->sc6.data() + at * 16;
    const __m512 dxv = _mm512_loadu_ps(dx + b * kTile);
#pragma GCC unroll 16
    for (int n = 0; n < kTile; ++n) {
      // vpmulld here: Q6_K's two-term f32 sums measured no faster
      __m512i total = _mm512_mullo_epi32(_mm512_loadu_si512(cb + 16 * n), _mm512_set1_epi32(sc[16 * n]));
      for (int s = 1; s < 16; ++s) {
        total = _mm512_add_epi32(total, _mm512_mullo_epi32(_mm512_loadu_si512(cb + 256 * s + 16 * n),
                                                           _mm512_set1_epi32(sc[16 * n + s])));
      }
      acc[n] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(j.c->d[at + n]), dxv), int_to_f32(total), acc[n]);
    }
  }
  write_tile(acc, j.rows, j.outputs, j.bias, j.y, j.ldy);
}

template <class E>
LOOM_QGEMM_TARGET void run_chunk(const PackedLinear& w, int64_t n0, int64_t n1, int64_t blocks, const uint8_t* tiles,
                                 const ActLayout& L, int64_t M, float* y, int64_t y_stride) {
  static thread_local WeightChunk t_chunk;
  const DType dt = w.weight_dtype();
  const Kind kind = kind_of(dt);
  WeightChunk& c = t_chunk;
  pack_chunk(w, n0, n1, blocks, E::biased(kind), c);
  typename E::Scope scope(kind == Kind::kQ6_K ? 16 : 32);
  const int64_t groups = (n1 - n0 + kTile - 1) / kTile;
  const int64_t K = w.in_features();
  // Usually the next chunk of this thread's share (share_chunks runs each share
  // front to back); a wrong guess costs only the prefetches.
  NextChunk next;
  const int64_t N = w.out_features();
  if (n1 < N) {
    next.p = reinterpret_cast<const char*>(w.quant_row(n1));
    next.end = next.p + static_cast<size_t>(std::min(n1 - n0, N - n1)) * w.quant_row_bytes();
    const int64_t steps_per_tile = kind == Kind::kQ8x32 ? std::max<int64_t>(1, blocks / 4) : blocks;
    const int64_t steps = std::max<int64_t>(1, (M + kTile - 1) / kTile * groups * steps_per_tile);
    next.lines_per_step = (static_cast<size_t>(next.end - next.p) / 64 + static_cast<size_t>(steps) - 1) /
                          static_cast<size_t>(steps);
  }
  for (int64_t m0 = 0; m0 < M; m0 += kTile) {
    const uint8_t* x = tiles + static_cast<size_t>(m0 / kTile) * L.tile_bytes();
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t first = n0 + g * kTile;
      TileJob j;
      j.next = &next;
      j.outputs = static_cast<int>(std::min<int64_t>(kTile, n1 - first));
      j.w = c.levels.data() + static_cast<size_t>(g * kTile) * static_cast<size_t>(K);
      j.x = x;
      j.L = &L;
      j.c = &c;
      j.group = g;
      j.rows = static_cast<int>(std::min<int64_t>(kTile, M - m0));
      j.bias = w.bias() ? w.bias() + first : nullptr;
      j.y = y + m0 * y_stride + first;
      j.ldy = y_stride;
      switch (kind) {
        case Kind::kQ8x32: tile_q8x32<E>(j); break;
        case Kind::kQ4_K: dt == DType::kQ4_K ? tile_q4_K<E, 4>(j) : tile_q4_K<E, 2>(j); break;
        case Kind::kQ6_K: tile_q6_K<E>(j); break;
      }
    }
  }
}

// y = act · wᵀ (+ bias) for M quantized activation rows, on engine E.
template <class E>
void linear_quantized_tiles(const uint8_t* act, size_t act_row_bytes, int64_t M, const PackedLinear& w, float* y,
                            int64_t y_stride, ThreadPool& pool) {
  const DType dt = w.weight_dtype();
  const bool k_types = dtype_block_elements(dt) == 256;
  ActLayout L;
  L.K = w.in_features();
  L.blocks = L.K / dtype_block_elements(dt);
  L.sums = kind_of(dt) == Kind::kQ4_K;
  L.units = E::biased(kind_of(dt)) ? L.blocks * units_per_block(kind_of(dt)) : 0;
  const int64_t tiles = (M + kTile - 1) / kTile;
  static thread_local std::vector<uint8_t> t_tiles;
  std::vector<uint8_t>& buf = t_tiles;
  buf.resize(static_cast<size_t>(tiles) * L.tile_bytes() + 64);
  uint8_t* tile_data = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63});
  pool.parallel_for(tiles, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      const int rows = static_cast<int>(std::min<int64_t>(kTile, M - t * kTile));
      build_act_tile(act + static_cast<size_t>(t * kTile) * act_row_bytes, act_row_bytes, rows, k_types, L,
                     tile_data + static_cast<size_t>(t) * L.tile_bytes());
    }
  });
  compiler_barrier();
  const int64_t N = w.out_features();
  const int64_t by_l2 = std::max<int64_t>(1, static_cast<int64_t>(kWeightChunkBytes) / (L.K * kTile)) * kTile;
  const int64_t even = std::max<int64_t>(kTile, (N / (4 * pool.num_threads())) / kTile * kTile);
  const int64_t chunk = std::min(by_l2, even);
  share_chunks(pool, N, chunk, [&](int64_t n0, int64_t n1) {
    run_chunk<E>(w, n0, n1, L.blocks, tile_data, L, M, y, y_stride);
  });
}

}  // namespace
}  // namespace loom::cpu::detail
