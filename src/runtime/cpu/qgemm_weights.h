// The weight side of the batched quantized GEMMs (qgemm_tiles.h for AMX and
// AVX512-VNNI, qgemm_avx2.cc): per chunk of outputs, the weights unpacked into a
// buffer that stays in L2 while every activation tile passes, 16 outputs
// (a group) at a time, per 32 elements one 16 × 32-byte tile of levels (row r at
// 32·r): Q8_0 as stored, Q4_0 as q − 8, Q6_K as q − 32, Q4_K/Q5_K unsigned, each
// plus the engine's level offset; the scales per block as f32 (and integers).
// The includer defines LOOM_QGEMM_TARGET (its ISA attribute, AVX2 and F16C at
// least) first.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "loom/core/quantize.h"
#include "runtime/cpu/matmul_kernels.h"
#include "runtime/cpu/qdot_x8_avx2.h"
#include "runtime/cpu/qlayout.h"

namespace loom::cpu::detail {
namespace {

constexpr int kTile = 16;                        // outputs per weight group (and activation rows per AVX-512 tile)
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

// Each unpacker writes level + offset (mod 256): the engine's encoding (0x80
// stores s8 levels as u8 + 128; 8 and 32 give Q4_0 and Q6_K their raw 4/6-bit q).
LOOM_QGEMM_TARGET LOOM_INLINE void unpack_q8_0(const BlockQ8_0& w, int8_t* dst, __m256i offset) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                      _mm256_add_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs)), offset));
}

// A Q4_0 block's 16 qs bytes in v.
LOOM_QGEMM_TARGET LOOM_INLINE void unpack_q4_0_qs(__m128i v, int8_t* dst, __m256i offset) {
  const __m128i low4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), low4), _mm_and_si128(v, low4));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                      _mm256_add_epi8(_mm256_sub_epi8(q, _mm256_set_m128i(eight, eight)), offset));
}

LOOM_QGEMM_TARGET LOOM_INLINE void unpack_q4_0(const BlockQ4_0& w, int8_t* dst, __m256i offset) {
  unpack_q4_0_qs(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.qs)), dst, offset);
}

LOOM_QGEMM_TARGET LOOM_INLINE __m128i load8(const uint8_t* p) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
}

// Sub-block j (32 levels) to dst + j·step.
LOOM_QGEMM_TARGET LOOM_INLINE void unpack_q4_K(const uint8_t* qs, const uint8_t* qh, int8_t* dst, size_t step,
                                               __m256i offset) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
  const __m256i h = qh ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh)) : _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
    for (int half = 0; half < 2; ++half) {
      const int j = 2 * c + half;
      __m256i q = _mm256_and_si256(half ? _mm256_srli_epi16(v, 4) : v, low4);
      // bit j of qh[l] is bit 4 of sub-block j's element l (Q5_K)
      q = _mm256_or_si256(q, _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(h, _mm_cvtsi32_si128(j)), 4), bit4));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + step * j), _mm256_add_epi8(q, offset));
    }
  }
}

// Half h of a Q6_K block (elements 128h..128h+127) from its ql bytes 64h..64h+31 (l0),
// 64h+32..64h+63 (l1) and qh bytes 32h..32h+31: elements 128h + 32g.. to dst + (4h + g)·step.
LOOM_QGEMM_TARGET LOOM_INLINE void unpack_q6_K_half(__m256i l0, __m256i l1, __m256i hi, int h, int8_t* dst, size_t step,
                                                    __m256i offset) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(3), bias = _mm256_set1_epi8(32);
  const __m256i lows[4] = {_mm256_and_si256(l0, low4), _mm256_and_si256(l1, low4),
                           _mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                           _mm256_and_si256(_mm256_srli_epi16(l1, 4), low4)};
  for (int g = 0; g < 4; ++g) {
    const __m256i top = _mm256_and_si256(_mm256_srl_epi16(hi, _mm_cvtsi32_si128(2 * g)), low2);
    const __m256i q = _mm256_or_si256(lows[g], _mm256_slli_epi16(top, 4));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + step * (4 * h + g)),
                        _mm256_add_epi8(_mm256_sub_epi8(q, bias), offset));
  }
}

// Elements 32c..32c+31 to dst + c·step.
LOOM_QGEMM_TARGET LOOM_INLINE void unpack_q6_K(const BlockQ6_K& w, int8_t* dst, size_t step, __m256i offset) {
  for (int h = 0; h < 2; ++h) {
    unpack_q6_K_half(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.ql + 64 * h)),
                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.ql + 64 * h + 32)),
                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qh + 32 * h)), h, dst, step, offset);
  }
}

// Four 8-byte pieces of a run layout, at in + o(p) for p = p0..p0+3, as 32 bytes.
template <size_t (*o)(int, int)>
LOOM_QGEMM_TARGET LOOM_INLINE __m256i load_pieces4(const uint8_t* in, int r, int p0) {
  return _mm256_set_m128i(_mm_unpacklo_epi64(load8(in + o(r, p0 + 2)), load8(in + o(r, p0 + 3))),
                          _mm_unpacklo_epi64(load8(in + o(r, p0)), load8(in + o(r, p0 + 1))));
}

// Row r's blocks [b0, b0 + nb) of the Q4_0x8, Q8_0x8 or Q6_Kx8 group at `group`, unpacked
// straight from the interleaved runs: a copy out as blocks first (quant_row_blocks) is
// read back by wider loads than wrote it, which the store buffer cannot forward, and
// for Q6_K it is a scalar copy per piece (the tiles at M = 32 on a Zen 5 then ran
// 20-35% slower than over stored rows, now 3-10%).
template <DType dt>
LOOM_QGEMM_TARGET void pack_row_of_group(const uint8_t* group, int r, int64_t b0, int64_t nb, int8_t* lv, size_t at,
                                         __m256i offset, WeightChunk& c) {
  for (int64_t i = 0; i < nb; ++i, at += kTile) {
    if constexpr (dt == DType::kQ4_0) {
      const uint8_t* in = group + static_cast<size_t>(b0 + i) * kQ4_0x8BlockBytes;
      std::memcpy(&c.d16[at], in + 2 * r, 2);
      unpack_q4_0_qs(_mm_unpacklo_epi64(load8(in + q4_0x8_qs_offset(r, 0)), load8(in + q4_0x8_qs_offset(r, 1))),
                     lv + kATile * i, offset);
    } else if constexpr (dt == DType::kQ8_0) {
      const uint8_t* in = group + static_cast<size_t>(b0 + i) * kQ8_0x8BlockBytes;
      std::memcpy(&c.d16[at], in + 2 * r, 2);
      const __m128i lo = _mm_unpacklo_epi64(load8(in + q8_0x8_qs_offset(r, 0)), load8(in + q8_0x8_qs_offset(r, 1)));
      const __m128i hi = _mm_unpacklo_epi64(load8(in + q8_0x8_qs_offset(r, 2)), load8(in + q8_0x8_qs_offset(r, 3)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lv + kATile * i), _mm256_add_epi8(_mm256_set_m128i(hi, lo), offset));
    } else {
      static_assert(dt == DType::kQ6_K);
      const uint8_t* in = group + static_cast<size_t>(b0 + i) * kQ6_Kx8BlockBytes;
      std::memcpy(&c.d16[at], in + 2 * r, 2);
      for (int s = 0; s < 16; ++s) c.sc6[at * 16 + s] = static_cast<int8_t>(in[q6_Kx8_scale_offset(r, s)]);
      for (int h = 0; h < 2; ++h) {
        unpack_q6_K_half(load_pieces4<q6_Kx8_ql_offset>(in, r, 8 * h),
                         load_pieces4<q6_Kx8_ql_offset>(in, r, 8 * h + 4),
                         load_pieces4<q6_Kx8_qh_offset>(in, r, 4 * h), h, lv + 8 * kATile * i, kATile, offset);
      }
    }
  }
}

// Four vectors of four rows' 8-byte pieces (p[i] = piece i of the rows in slots
// 0..3 of a run) → per slot the row's four pieces in order.
LOOM_QGEMM_TARGET LOOM_INLINE void transpose_pieces4(const __m256i* p, __m256i* slot) {
  const __m256i a = _mm256_unpacklo_epi64(p[0], p[1]), b = _mm256_unpacklo_epi64(p[2], p[3]);
  const __m256i c = _mm256_unpackhi_epi64(p[0], p[1]), d = _mm256_unpackhi_epi64(p[2], p[3]);
  slot[0] = _mm256_permute2x128_si256(a, b, 0x20);
  slot[1] = _mm256_permute2x128_si256(c, d, 0x20);
  slot[2] = _mm256_permute2x128_si256(a, b, 0x31);
  slot[3] = _mm256_permute2x128_si256(c, d, 0x31);
}

// The row in slot s of run `run` of an x8 group (the inverse of x8_run_slot_offset).
constexpr int x8_row_of(int run, int s) { return (s & 1) | (run << 1) | ((s >> 1) << 2); }

// Pieces p0..p0+3 (layout o) of the four rows of run `run`, one row a vector (slot
// order): what load_pieces4 gives for one row, for four rows at once.
template <size_t (*o)(int, int)>
LOOM_QGEMM_TARGET LOOM_INLINE void load_run_rows4(const uint8_t* in, int run, int p0, __m256i* rows) {
  __m256i p[4];
  for (int i = 0; i < 4; ++i) p[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + o(x8_row_of(run, 0), p0 + i)));
  transpose_pieces4(p, rows);
}

// All 8 rows of a Q4_0x8 or Q8_0x8 group block at `in` into rows 0..7 of an A tile
// (row r at lv + 32·r), their scales to d16[0..7]. A row of either is four 8-byte
// pieces, one from each of four 32-byte vectors (Q8_0: its qs runs; Q4_0: the low
// and high nibbles of its two runs), four rows a vector: one 4×4 transposition of
// 8-byte pieces per run pair. Row by row (pack_row_of_group) it took two to four
// 8-byte loads, a shuffle and a scalar scale copy per row and block.
template <DType dt>
LOOM_QGEMM_TARGET LOOM_INLINE void pack_group_block(const uint8_t* in, int8_t* lv, uint16_t* d16, __m256i offset) {
  static_assert(dt == DType::kQ4_0 || dt == DType::kQ8_0);
  std::memcpy(d16, in, 16);  // d of rows 0..7, first in either layout
  const __m256i add = dt == DType::kQ4_0 ? _mm256_add_epi8(offset, _mm256_set1_epi8(-8)) : offset;
  for (int run = 0; run < 2; ++run) {  // rows 0, 1, 4, 5, then rows 2, 3, 6, 7
    __m256i slot[4];
    if constexpr (dt == DType::kQ4_0) {
      const __m256i low4 = _mm256_set1_epi8(0x0F);
      const int r0 = x8_row_of(run, 0);
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + q4_0x8_qs_offset(r0, 0)));
      const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + q4_0x8_qs_offset(r0, 1)));
      const __m256i p[4] = {_mm256_and_si256(x, low4), _mm256_and_si256(y, low4),  // elements 0-7, 8-15
                            _mm256_and_si256(_mm256_srli_epi16(x, 4), low4),      // 16-23
                            _mm256_and_si256(_mm256_srli_epi16(y, 4), low4)};     // 24-31
      transpose_pieces4(p, slot);
    } else {
      load_run_rows4<q8_0x8_qs_offset>(in, run, 0, slot);
    }
    for (int s = 0; s < 4; ++s) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lv + 32 * x8_row_of(run, s)), _mm256_add_epi8(slot[s], add));
    }
  }
}

// The same for a Q6_Kx8 group block: rows 0..7's levels into their 8 A tiles (row r of
// tile j at lv + j·kATile + 32·r), d to d16[0..7], the 16 sub-block scales of row r
// to sc6[16·r..16·r + 15]. The scales are an 8×8 transposition of 16-bit pairs.
LOOM_QGEMM_TARGET LOOM_INLINE void pack_group_block_q6_K(const uint8_t* in, int8_t* lv, uint16_t* d16, int32_t* sc6,
                                                         __m256i offset) {
  std::memcpy(d16, in, 16);
  __m128i v[8], t[8];
  for (int j = 0; j < 8; ++j) v[j] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + q6_Kx8_scale_offset(0, 2 * j)));
  for (int j = 0; j < 4; ++j) {
    t[2 * j] = _mm_unpacklo_epi16(v[2 * j], v[2 * j + 1]);
    t[2 * j + 1] = _mm_unpackhi_epi16(v[2 * j], v[2 * j + 1]);
  }
  for (int j = 0; j < 2; ++j) {
    v[4 * j + 0] = _mm_unpacklo_epi32(t[4 * j + 0], t[4 * j + 2]);
    v[4 * j + 1] = _mm_unpackhi_epi32(t[4 * j + 0], t[4 * j + 2]);
    v[4 * j + 2] = _mm_unpacklo_epi32(t[4 * j + 1], t[4 * j + 3]);
    v[4 * j + 3] = _mm_unpackhi_epi32(t[4 * j + 1], t[4 * j + 3]);
  }
  for (int q = 0; q < 4; ++q) {  // rows 2q, 2q + 1
    const __m128i lo = _mm_unpacklo_epi64(v[q], v[4 + q]), hi = _mm_unpackhi_epi64(v[q], v[4 + q]);
    const __m128i rows[2] = {lo, hi};
    for (int i = 0; i < 2; ++i) {
      int32_t* dst = sc6 + 16 * (2 * q + i);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_cvtepi8_epi32(rows[i]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 8), _mm256_cvtepi8_epi32(_mm_srli_si128(rows[i], 8)));
    }
  }
  for (int run = 0; run < 2; ++run) {
    for (int h = 0; h < 2; ++h) {
      __m256i l0[4], l1[4], qh[4];
      load_run_rows4<q6_Kx8_ql_offset>(in, run, 8 * h, l0);
      load_run_rows4<q6_Kx8_ql_offset>(in, run, 8 * h + 4, l1);
      load_run_rows4<q6_Kx8_qh_offset>(in, run, 4 * h, qh);
      for (int s = 0; s < 4; ++s) unpack_q6_K_half(l0[s], l1[s], qh[s], h, lv + 32 * x8_row_of(run, s), kATile, offset);
    }
  }
}

// The same for a Q4_Kx8 or Q5_Kx8 group block: rows 0..7's levels into their 8 A tiles
// (row r of tile j at lv + j·kATile + 32·r), d and dmin to d16/dmin16[0..7], row r's
// sub-block scales and mins to sc/mins[8·r + j]. A row's qs bytes 32c..32c+31 (sub-blocks
// 2c, 2c + 1) are four pieces of one chunk, four rows a vector after one transposition
// per run, as for Q6_Kx8; Q5_K's fifth bits are one byte of each piece's mask per row.
// Through a copy out as BlockQ5_K (quant_row_blocks) the fifth bits took an 8×8 bit
// transposition per piece and row: the AVX2 tiles at M = 32 ran a third slower than
// over stored rows.
template <bool kQ5>
LOOM_QGEMM_TARGET LOOM_INLINE void pack_group_block_k4(const uint8_t* in, int8_t* lv, uint16_t* d16, uint16_t* dmin16,
                                                       float* sc, float* mins, __m256i offset) {
  std::memcpy(d16, in, 16);
  std::memcpy(dmin16, in + 16, 16);
  for (int r = 0; r < 8; ++r) {
    uint8_t scales[12];
    for (int t = 0; t < 12; ++t) scales[t] = in[kQ4_Kx8ScalesOffset + 8 * t + r];
    for (int j = 0; j < 8; ++j) {
      uint8_t s, m;
      unpack_scale_min_k4(j, scales, &s, &m);
      sc[8 * r + j] = s;
      mins[8 * r + j] = m;
    }
  }
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  // Four masks' bytes 0..3 (one mask per piece h) → per slot s its byte of each: bits of levels 8h + i.
  const __m128i by_slot = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (int run = 0; run < 2; ++run) {
    for (int c = 0; c < 4; ++c) {
      __m256i rows[4];
      load_run_rows4<q4_Kx8_qs_piece_offset>(in, run, 4 * c, rows);
      __m128i fifth[2];  // [low nibbles: sub-block 2c, high: 2c + 1], dword s for slot s
      if constexpr (kQ5) {
        for (int high = 0; high < 2; ++high) {
          int32_t m[4];
          for (int h = 0; h < 4; ++h) std::memcpy(&m[h], in + q5_Kx8_mask_offset(c, h, high) + 4 * run, 4);
          fifth[high] = _mm_shuffle_epi8(_mm_setr_epi32(m[0], m[1], m[2], m[3]), by_slot);
        }
      }
      for (int s = 0; s < 4; ++s) {
        __m256i lo = _mm256_and_si256(rows[s], low4), hi = _mm256_and_si256(_mm256_srli_epi16(rows[s], 4), low4);
        if constexpr (kQ5) {
          lo = _mm256_or_si256(lo, sixteen_where_bits(static_cast<uint32_t>(_mm_cvtsi128_si32(fifth[0]))));
          hi = _mm256_or_si256(hi, sixteen_where_bits(static_cast<uint32_t>(_mm_cvtsi128_si32(fifth[1]))));
          fifth[0] = _mm_srli_si128(fifth[0], 4);
          fifth[1] = _mm_srli_si128(fifth[1], 4);
        }
        int8_t* row = lv + 32 * x8_row_of(run, s);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + 2 * c * kATile), _mm256_add_epi8(lo, offset));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + (2 * c + 1) * kATile), _mm256_add_epi8(hi, offset));
      }
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
LOOM_QGEMM_TARGET void pack_row(const uint8_t* row, int64_t blocks, int8_t* lv, size_t at, __m256i offset,
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
      unpack_q8_0(x, lv + kATile * b, offset);
    } else if constexpr (dt == DType::kQ4_0) {
      const BlockQ4_0& x = *reinterpret_cast<const BlockQ4_0*>(block);
      c.d16[at] = x.d;
      unpack_q4_0(x, lv + kATile * b, offset);
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
      unpack_q4_K(qs, qh, lv + 8 * kATile * b, kATile, offset);
    } else {
      const BlockQ6_K& x = *reinterpret_cast<const BlockQ6_K*>(block);
      c.d16[at] = x.d;
      for (int s = 0; s < 16; ++s) c.sc6[at * 16 + s] = x.scales[s];
      unpack_q6_K(x, lv + 8 * kATile * b, kATile, offset);
    }
  }
}

// n a multiple of 8 (F16C, so every engine's target has it).
LOOM_QGEMM_TARGET void f16_to_f32_x8(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
}

// Fills `c` for outputs [n0, n1), levels stored + offset (level_offset()).
template <DType dt>
LOOM_QGEMM_TARGET void pack_chunk_of(const PackedLinear& w, int64_t n0, int64_t n1, int64_t blocks, int8_t level_offset,
                                     WeightChunk& c) {
  const int64_t K = w.in_features();
  const int64_t groups = (n1 - n0 + kTile - 1) / kTile;
  const size_t per_group = static_cast<size_t>(blocks) * kTile;
  const size_t scales = static_cast<size_t>(groups) * per_group;
  const size_t group_bytes = kTile * static_cast<size_t>(K);
  c.levels.resize(static_cast<size_t>(groups) * group_bytes);
  // Padded outputs: level 0 (stored + offset), scales 0.
  if ((n1 - n0) % kTile != 0) std::memset(c.levels.data() + (groups - 1) * group_bytes, static_cast<uint8_t>(level_offset), group_bytes);
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
  const __m256i offset = _mm256_set1_epi8(level_offset);
  // Block by block across a group's 16 rows, so each 512-byte tile is written whole.
  constexpr int64_t step = dt == DType::kQ8_0 || dt == DType::kQ4_0 ? 8 : 1;
  // A step of an interleaved row's blocks (sized for any type's branch of quant_row_blocks).
  alignas(32) uint8_t copied[std::max<size_t>(step * pack_block_bytes<dt>(), 8 * sizeof(BlockQ8_0))];
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t rows = std::min<int64_t>(kTile, n1 - n0 - g * kTile);
    int8_t* base = c.levels.data() + static_cast<size_t>(g) * group_bytes;
    if constexpr (dt == DType::kQ4_0 || dt == DType::kQ8_0 || dt == DType::kQ6_K || k4) {
      // A tile of two whole interleaved groups: a group block at a time.
      constexpr int x8 = 8;
      const int64_t first = n0 + g * kTile;
      if (w.quant_group_rows() == x8 && rows == kTile && first % x8 == 0 &&
          first + kTile <= w.out_features() / x8 * x8) {
        constexpr size_t block_bytes = dt == DType::kQ4_0   ? kQ4_0x8BlockBytes
                                       : dt == DType::kQ8_0 ? kQ8_0x8BlockBytes
                                       : dt == DType::kQ4_K ? kQ4_Kx8BlockBytes
                                       : dt == DType::kQ5_K ? kQ5_Kx8BlockBytes
                                                            : kQ6_Kx8BlockBytes;
        constexpr size_t tiles_per_block = dt == DType::kQ4_0 || dt == DType::kQ8_0 ? 1 : 8;
        for (int half = 0; half < 2; ++half) {
          const uint8_t* group = w.quant_row(first + x8 * half);
          for (int64_t b = 0; b < blocks; ++b) {
            const uint8_t* in = group + static_cast<size_t>(b) * block_bytes;
            int8_t* lv = base + static_cast<size_t>(b) * tiles_per_block * kATile + 32 * x8 * half;
            const size_t at = static_cast<size_t>(g) * per_group + static_cast<size_t>(b) * kTile + x8 * half;
            if constexpr (dt == DType::kQ6_K) {
              pack_group_block_q6_K(in, lv, &c.d16[at], &c.sc6[at * 16], offset);
            } else if constexpr (k4) {
              pack_group_block_k4<dt == DType::kQ5_K>(in, lv, &c.d16[at], &c.dmin16[at], &c.sc[at * 8], &c.mins[at * 8],
                                                      offset);
            } else {
              pack_group_block<dt>(in, lv, &c.d16[at], offset);
            }
          }
        }
        continue;
      }
    }
    for (int64_t b0 = 0; b0 < blocks; b0 += step) {
      const int64_t nb = std::min(step, blocks - b0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t n = n0 + g * kTile + r;
        const size_t lv_at = 32 * static_cast<size_t>(r) + static_cast<size_t>(b0) * kATile * (step == 1 ? 8 : 1);
        const size_t at = static_cast<size_t>(g) * per_group + static_cast<size_t>(b0) * kTile + static_cast<size_t>(r);
        if constexpr (dt == DType::kQ4_0 || dt == DType::kQ8_0 || dt == DType::kQ6_K) {
          const int64_t group_rows = w.quant_group_rows();
          if (group_rows > 1 && n < w.out_features() / group_rows * group_rows) {
            pack_row_of_group<dt>(w.quant_row(n / group_rows * group_rows), static_cast<int>(n % group_rows), b0, nb,
                                  base + lv_at, at, offset, c);
            continue;
          }
        }
        const uint8_t* row = w.quant_group_rows() == 1
                                 ? w.quant_row(n) + static_cast<size_t>(b0) * pack_block_bytes<dt>()
                                 : quant_row_blocks(w, n, b0, nb, copied);
        pack_row<dt>(row, nb, base + lv_at, at, offset, c);
      }
    }
  }
  f16_to_f32_x8(c.d16.data(), c.d.data(), scales);
  if constexpr (k4) f16_to_f32_x8(c.dmin16.data(), c.dmin.data(), scales);
  compiler_barrier();
}

LOOM_QGEMM_TARGET void pack_chunk(const PackedLinear& w, int64_t n0, int64_t n1, int64_t blocks, int8_t level_offset,
                                  WeightChunk& c) {
  switch (w.weight_dtype()) {
    case DType::kQ8_0: pack_chunk_of<DType::kQ8_0>(w, n0, n1, blocks, level_offset, c); break;
    case DType::kQ4_0: pack_chunk_of<DType::kQ4_0>(w, n0, n1, blocks, level_offset, c); break;
    case DType::kQ4_K: pack_chunk_of<DType::kQ4_K>(w, n0, n1, blocks, level_offset, c); break;
    case DType::kQ5_K: pack_chunk_of<DType::kQ5_K>(w, n0, n1, blocks, level_offset, c); break;
    case DType::kQ6_K: pack_chunk_of<DType::kQ6_K>(w, n0, n1, blocks, level_offset, c); break;
    default: break;
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

// Outputs per work chunk of the tiled GEMMs: a chunk's unpacked weights fit
// kWeightChunkBytes (L2), and each thread gets about four chunks.
inline int64_t tile_chunk_outputs(int64_t K, int64_t N, int threads) {
  const int64_t by_l2 = std::max<int64_t>(1, static_cast<int64_t>(kWeightChunkBytes) / (K * kTile)) * kTile;
  const int64_t even = std::max<int64_t>(kTile, (N / (4 * threads)) / kTile * kTile);
  return std::min(by_l2, even);
}

// The calling thread's buffer for a call's activation tiles, 64-byte aligned.
inline uint8_t* act_tile_buffer(size_t bytes) {
  static thread_local std::vector<uint8_t> t_tiles;
  t_tiles.resize(bytes + 64);
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(t_tiles.data()) + 63) & ~uintptr_t{63});
}

// The chunk after [n0, n1) (the same number of rows, or to the end), spread over
// `steps` calls of step(); nothing when [n0, n1) ends the matrix.
inline NextChunk next_chunk_after(const PackedLinear& w, int64_t n0, int64_t n1, int64_t steps) {
  NextChunk next;
  const int64_t N = w.out_features();
  if (n1 >= N) return next;
  next.p = reinterpret_cast<const char*>(w.quant_row(n1));
  next.end = next.p + static_cast<size_t>(std::min(n1 - n0, N - n1)) * w.quant_row_bytes();
  const size_t s = static_cast<size_t>(std::max<int64_t>(1, steps));
  next.lines_per_step = (static_cast<size_t>(next.end - next.p) / 64 + s - 1) / s;
  return next;
}
}  // namespace
}  // namespace loom::cpu::detail
