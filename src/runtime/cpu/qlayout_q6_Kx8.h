// Q6_K rows interleaved in groups of 8 ("Q6_Kx8"), the layout PackedLinear keeps
// Q6_K weights in where the AVX2 decode kernel reads it (qdot_q6_Kx8_avx2.cc).
// From rows, the decode kernel reads four 210-byte streams at once and reduces
// each row's lanes per block; from this layout it reads one stream, and the 16
// sub-block scales are applied per row lane, one reduction per 8 rows.
//
// A group of 8 rows occupies exactly the bytes the 8 rows would (8 × 210 per
// block), block after block; group block b is 1680 bytes:
//   bytes    0-15   d of rows 0..7 (f16)
//   bytes   16-143  the scales in pairs: for j = 0..7, 16 bytes holding sub-blocks
//                   2j and 2j + 1 of row r at 16 + 16j + 2r + {0, 1}, so that one
//                   widening load gives every row's scale pair (the −32 term) and
//                   one shuffle spreads a sub-block's scales to their rows' lanes
//   bytes  144-1167 ql: per 8-byte piece p (0..15, ql bytes 8p..8p+7) 64 bytes,
//                   the piece of rows 0, 1, 4, 5, then of rows 2, 3, 6, 7
//   bytes 1168-1679 qh: per 8-byte piece p (0..7, qh bytes 8p..8p+7) likewise
// so that, as in Q4_Kx8, a 32-byte run is four rows × 8 bytes and one hadd of two
// runs' per-row sums gives rows 0..7 in order. Rows past the last whole group stay
// as stored, at the offsets they would have as rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "loom/core/quantize.h"
#include "runtime/cpu/qlayout_x8.h"

namespace loom::cpu::detail {

constexpr int kQ6_KGroupRows = 8;
constexpr size_t kQ6_Kx8BlockBytes = kQ6_KGroupRows * sizeof(BlockQ6_K);
static_assert(kQ6_Kx8BlockBytes == 1680, "BlockQ6_K is 210 bytes");
constexpr size_t kQ6_Kx8ScalesOffset = 16;
constexpr size_t kQ6_Kx8QlOffset = 144;
constexpr size_t kQ6_Kx8QhOffset = 1168;

// Offsets inside a group block of row r's ql bytes [8p, 8p + 8) (p < 16) and qh
// bytes [8p, 8p + 8) (p < 8), r < 8.
constexpr size_t q6_Kx8_ql_offset(int r, int p) {
  return kQ6_Kx8QlOffset + static_cast<size_t>(p) * 64 + x8_run_slot_offset(r);
}
constexpr size_t q6_Kx8_qh_offset(int r, int p) {
  return kQ6_Kx8QhOffset + static_cast<size_t>(p) * 64 + x8_run_slot_offset(r);
}
// Offset of row r's scale of sub-block s (s < 16).
constexpr size_t q6_Kx8_scale_offset(int r, int s) {
  return kQ6_Kx8ScalesOffset + static_cast<size_t>(s / 2) * 16 + 2 * static_cast<size_t>(r) + s % 2;
}

// The 8 rows at `rows` (row_bytes apart, `blocks` blocks each) → one group at dst.
void interleave_q6_Kx8(const uint8_t* rows, size_t row_bytes, int64_t blocks, uint8_t* dst);

// Blocks [b0, b0 + nb) of row r of the group at `group`, as stored: BlockQ6_Ks.
inline void q6_Kx8_row_blocks(const uint8_t* group, int r, int64_t b0, int64_t nb, BlockQ6_K* dst) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* in = group + static_cast<size_t>(b0 + i) * kQ6_Kx8BlockBytes;
    std::memcpy(&dst[i].d, in + 2 * r, 2);
    for (int s = 0; s < 16; ++s) std::memcpy(&dst[i].scales[s], in + q6_Kx8_scale_offset(r, s), 1);
    for (int p = 0; p < 16; ++p) std::memcpy(dst[i].ql + 8 * p, in + q6_Kx8_ql_offset(r, p), 8);
    for (int p = 0; p < 8; ++p) std::memcpy(dst[i].qh + 8 * p, in + q6_Kx8_qh_offset(r, p), 8);
  }
}

}  // namespace loom::cpu::detail
