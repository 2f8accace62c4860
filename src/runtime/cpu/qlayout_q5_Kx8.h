// Q5_K rows interleaved in groups of 8 ("Q5_Kx8"), the layout PackedLinear keeps
// Q5_K weights in for the decode kernels (qdot_q5_Kx8_avx512.cc, qdot_q5_Kx8_avx2.cc).
// It is Q4_Kx8 (qlayout_q4_Kx8.h) plus each level's fifth bit, stored as the byte
// masks of the kernel's vectors: from rows, the kernel read Q5_K at 22-36 GB/s on a
// Zen 4, under its read bandwidth, as every block and row paid its own scale
// unpacking and reduction.
//
// A group of 8 rows occupies exactly the bytes the 8 rows would (8 × 176 per
// block), block after block; group block b is 1408 bytes:
//   bytes    0-1151 as a Q4_Kx8 group block: d, dmin, the transposed scale bytes
//                   and the qs runs (q4_Kx8_qs_offset)
//   bytes 1152-1407 per chunk c (0..3) 64 bytes: for h = 0..3, two 64-bit masks,
//                   the fifth bits of sub-block 2c (low nibbles) then 2c + 1 (high
//                   nibbles) of qs bytes 32c + 8h .. + 7 of the 8 rows: bit i is the
//                   level in byte i of the 64 bytes at q4_Kx8_qs_offset(0, c, h)
//                   (row r's 8 bytes at x8_run_slot_offset(r))
// so that one kmov loads the bits a vector of levels needs. Rows past the last whole
// group stay as stored, at the offsets they would have as rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/core/quantize.h"
#include "runtime/cpu/qlayout_q4_Kx8.h"

namespace loom::cpu::detail {

constexpr int kQ5_KGroupRows = 8;
constexpr size_t kQ5_Kx8BlockBytes = kQ5_KGroupRows * sizeof(BlockQ5_K);
static_assert(kQ5_Kx8BlockBytes == 1408, "BlockQ5_K is 176 bytes");
static_assert(kQ4_Kx8QsOffset + 1024 == 1152, "Q5_Kx8's head and qs are Q4_Kx8's");
constexpr size_t kQ5_Kx8MasksOffset = 1152;

// Byte offset, inside a group block, of the 64-bit mask of chunk c, piece h, nibble
// `high` (0: sub-block 2c, 1: sub-block 2c + 1).
constexpr size_t q5_Kx8_mask_offset(int c, int h, int high) {
  return kQ5_Kx8MasksOffset + static_cast<size_t>(c) * 64 + static_cast<size_t>(h) * 16 + static_cast<size_t>(high) * 8;
}

// The 8 rows at `rows` (row_bytes apart, `blocks` blocks each) → one group at dst.
void interleave_q5_Kx8(const uint8_t* rows, size_t row_bytes, int64_t blocks, uint8_t* dst);

// Blocks [b0, b0 + nb) of row r of the group at `group`, as stored: BlockQ5_Ks.
void q5_Kx8_row_blocks(const uint8_t* group, int r, int64_t b0, int64_t nb, BlockQ5_K* dst);

}  // namespace loom::cpu::detail
