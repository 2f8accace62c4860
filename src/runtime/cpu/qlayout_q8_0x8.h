// Q8_0 rows interleaved in groups of 8 ("Q8_0x8"), the layout PackedLinear keeps
// Q8_0 weights in where the AVX2 decode kernel reads it (qdot_q8_0x8_avx2.cc):
// one scale load and one hadd per block for 8 rows, where reading them from
// their own rows takes 8 scale conversions and a reduction per row and block.
//
// A group of 8 rows occupies exactly the bytes the 8 rows would (8 × 34 per
// block), block after block; group block b is 272 bytes:
//   bytes  0-15   d of rows 0..7 (f16)
//   then for h = 0..3 (qs bytes 8h..8h+7 of each row), 64 bytes:
//     32 bytes of rows 0, 1, 4, 5 (8 bytes each), 32 bytes of rows 2, 3, 6, 7
// so that a 32-byte run is four rows × 8 bytes, and one hadd of the two runs'
// per-row sums gives rows 0..7 in order (as Q4_0x8). Rows past the last whole
// group stay as stored, at the offsets they would have as rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "loom/core/quantize.h"
#include "runtime/cpu/qlayout_x8.h"

namespace loom::cpu::detail {

constexpr int kQ8_0GroupRows = 8;
constexpr size_t kQ8_0x8BlockBytes = kQ8_0GroupRows * sizeof(BlockQ8_0);
static_assert(kQ8_0x8BlockBytes == 272, "BlockQ8_0 is 34 bytes");

// Byte offset, inside a group block, of qs bytes [8h, 8h + 8) of row r (r < 8, h < 4).
constexpr size_t q8_0x8_qs_offset(int r, int h) { return 16 + static_cast<size_t>(h) * 64 + x8_run_slot_offset(r); }

// The 8 rows at `rows` (row_bytes apart, `blocks` blocks each) → one group at dst.
void interleave_q8_0x8(const uint8_t* rows, size_t row_bytes, int64_t blocks, uint8_t* dst);

// Blocks [b0, b0 + nb) of row r of the group at `group`, as stored: BlockQ8_0s.
inline void q8_0x8_row_blocks(const uint8_t* group, int r, int64_t b0, int64_t nb, BlockQ8_0* dst) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* in = group + static_cast<size_t>(b0 + i) * kQ8_0x8BlockBytes;
    std::memcpy(&dst[i].d, in + 2 * r, 2);
    for (int h = 0; h < 4; ++h) std::memcpy(dst[i].qs + 8 * h, in + q8_0x8_qs_offset(r, h), 8);
  }
}

}  // namespace loom::cpu::detail
