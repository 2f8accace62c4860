// Q4_0 rows interleaved in groups of 8 ("Q4_0x8"), the layout PackedLinear keeps
// Q4_0 weights in where the AVX2 decode kernel reads it (qdot_q4_0x8_avx2.cc).
// Reading eight rows side by side from their own rows costs eight scale loads
// and a three-level reduction per block; from this layout it costs one scale
// load and one hadd, and the weights stream as one run instead of eight
// (2048→8192 at batch 1, 2 threads of a Zen 3: 31 → 38 GB/s, at the read bound).
//
// A group of 8 rows occupies exactly the bytes the 8 rows would (8 × 18 per
// block), block after block; group block b is 144 bytes:
//   bytes   0-15   d of rows 0..7 (f16)
//   bytes  16-47   qs bytes 0-7 of rows 0, 1, 4, 5 (8 bytes each)
//   bytes  48-79   qs bytes 0-7 of rows 2, 3, 6, 7
//   bytes  80-111  qs bytes 8-15 of rows 0, 1, 4, 5
//   bytes 112-143  qs bytes 8-15 of rows 2, 3, 6, 7
// so that a 32-byte run is four rows × 8 bytes, and one hadd of the two runs'
// per-row sums gives rows 0..7 in order. Rows past the last whole group stay as
// stored, at the offsets they would have as rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "loom/core/quantize.h"
#include "runtime/cpu/qlayout_x8.h"

namespace loom::cpu::detail {

constexpr int kQ4_0GroupRows = 8;
constexpr size_t kQ4_0x8BlockBytes = kQ4_0GroupRows * sizeof(BlockQ4_0);
static_assert(kQ4_0x8BlockBytes == 144, "BlockQ4_0 is 18 bytes");

// Byte offset, inside a group block, of qs bytes [8h, 8h + 8) of row r (r < 8, h < 2).
constexpr size_t q4_0x8_qs_offset(int r, int h) { return 16 + static_cast<size_t>(h) * 64 + x8_run_slot_offset(r); }

// The 8 rows at `rows` (row_bytes apart, `blocks` blocks each) → one group at dst.
void interleave_q4_0x8(const uint8_t* rows, size_t row_bytes, int64_t blocks, uint8_t* dst);

// Blocks [b0, b0 + nb) of row r of the group at `group` (blocks per row:
// `blocks`), as stored: BlockQ4_0s.
// (Inline: the tiles' unpacking calls it per row and step; out of line it took
// 10% of a 32-row batch.)
inline void q4_0x8_row_blocks(const uint8_t* group, int r, int64_t b0, int64_t nb, BlockQ4_0* dst) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* in = group + static_cast<size_t>(b0 + i) * kQ4_0x8BlockBytes;
    std::memcpy(&dst[i].d, in + 2 * r, 2);
    std::memcpy(dst[i].qs, in + q4_0x8_qs_offset(r, 0), 8);
    std::memcpy(dst[i].qs + 8, in + q4_0x8_qs_offset(r, 1), 8);
  }
}

}  // namespace loom::cpu::detail
