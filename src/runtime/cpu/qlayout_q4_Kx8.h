// Q4_K rows interleaved in groups of 8 ("Q4_Kx8"), the layout PackedLinear keeps
// Q4_K weights in where the AVX2 decode kernel reads it (qdot_k4x8_avx2.h).
// From rows, every 144-byte block costs its own scale unpacking, eight scale
// shuffles and a reduction; from this layout one unpacking serves eight rows and
// the sub-block scales are applied per row lane.
//
// A group of 8 rows occupies exactly the bytes the 8 rows would (8 × 144 per
// block), block after block; group block b is 1152 bytes:
//   bytes    0-15   d of rows 0..7 (f16)
//   bytes   16-31   dmin of rows 0..7 (f16)
//   bytes   32-127  the scale bytes, transposed: byte t (0..11) of row r at 32 + 8t + r,
//                   so that three loads unpack the 8 rows' scales and mins at once
//   bytes  128-1151 per chunk c (0..3: qs bytes 32c..32c+31, whose low nibbles are
//                   sub-block 2c and high ones 2c + 1) 256 bytes: for h = 0..3, qs
//                   bytes 32c + 8h .. + 7 of rows 0, 1, 4, 5, then of rows 2, 3, 6, 7
// so that, as in Q4_0x8, a 32-byte run is four rows × 8 bytes and one hadd of
// two runs' per-row sums gives rows 0..7 in order. Rows past the last whole
// group stay as stored, at the offsets they would have as rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "loom/core/quantize.h"
#include "runtime/cpu/qlayout_x8.h"

namespace loom::cpu::detail {

constexpr int kQ4_KGroupRows = 8;
constexpr size_t kQ4_Kx8BlockBytes = kQ4_KGroupRows * sizeof(BlockQ4_K);
static_assert(kQ4_Kx8BlockBytes == 1152, "BlockQ4_K is 144 bytes");
constexpr size_t kQ4_Kx8ScalesOffset = 32;
constexpr size_t kQ4_Kx8QsOffset = 128;

// Byte offset, inside a group block, of qs bytes [32c + 8h, 32c + 8h + 8) of row r
// (r < 8, c < 4, h < 4).
constexpr size_t q4_Kx8_qs_offset(int r, int c, int h) {
  return kQ4_Kx8QsOffset + static_cast<size_t>(c) * 256 + static_cast<size_t>(h) * 64 + x8_run_slot_offset(r);
}

// The same by piece: qs bytes [8p, 8p + 8) of row r, p = 4c + h (a row's pieces in order
// are its qs bytes in order).
constexpr size_t q4_Kx8_qs_piece_offset(int r, int p) { return q4_Kx8_qs_offset(r, p / 4, p % 4); }

// Row r's d, dmin, scale bytes and qs of one block into the group block at `out`, and
// back (what Q4_Kx8 and Q5_Kx8 share).
inline void put_k4x8_row(uint8_t* out, int r, const uint16_t& d, const uint16_t& dmin, const uint8_t* scales,
                         const uint8_t* qs) {
  std::memcpy(out + 2 * r, &d, 2);
  std::memcpy(out + 16 + 2 * r, &dmin, 2);
  for (int t = 0; t < 12; ++t) out[kQ4_Kx8ScalesOffset + 8 * t + r] = scales[t];
  for (int c = 0; c < 4; ++c) {
    for (int h = 0; h < 4; ++h) std::memcpy(out + q4_Kx8_qs_offset(r, c, h), qs + 32 * c + 8 * h, 8);
  }
}
inline void get_k4x8_row(const uint8_t* in, int r, uint16_t& d, uint16_t& dmin, uint8_t* scales, uint8_t* qs) {
  std::memcpy(&d, in + 2 * r, 2);
  std::memcpy(&dmin, in + 16 + 2 * r, 2);
  for (int t = 0; t < 12; ++t) scales[t] = in[kQ4_Kx8ScalesOffset + 8 * t + r];
  for (int c = 0; c < 4; ++c) {
    for (int h = 0; h < 4; ++h) std::memcpy(qs + 32 * c + 8 * h, in + q4_Kx8_qs_offset(r, c, h), 8);
  }
}

// The 8 rows at `rows` (row_bytes apart, `blocks` blocks each) → one group at dst.
void interleave_q4_Kx8(const uint8_t* rows, size_t row_bytes, int64_t blocks, uint8_t* dst);

// Blocks [b0, b0 + nb) of row r of the group at `group`, as stored: BlockQ4_Ks.
inline void q4_Kx8_row_blocks(const uint8_t* group, int r, int64_t b0, int64_t nb, BlockQ4_K* dst) {
  for (int64_t i = 0; i < nb; ++i) {
    get_k4x8_row(group + static_cast<size_t>(b0 + i) * kQ4_Kx8BlockBytes, r, dst[i].d, dst[i].dmin, dst[i].scales,
                 dst[i].qs);
  }
}

}  // namespace loom::cpu::detail
