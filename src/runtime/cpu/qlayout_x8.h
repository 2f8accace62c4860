// What the interleaved groups of 8 rows share (Q4_0x8, Q4_Kx8, Q6_Kx8, Q8_0x8): 8-byte
// pieces of the rows laid out as 32-byte runs of four rows, rows 0, 1, 4, 5 in
// the first run of a pair and 2, 3, 6, 7 in the second, so that one hadd of the
// two runs' per-row sums gives rows 0..7 in order.
#pragma once

#include <cstddef>

namespace loom::cpu::detail {

// Offset of row r's 8-byte piece inside its pair of runs (r < 8).
constexpr size_t x8_run_slot_offset(int r) {
  const int run = (r >> 1) & 1, slot = (r & 1) | ((r >> 2) << 1);
  return static_cast<size_t>(run) * 32 + static_cast<size_t>(slot) * 8;
}

}  // namespace loom::cpu::detail
