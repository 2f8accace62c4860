// Which quantized types PackedLinear may keep interleaved in groups of rows
// (Q4_0x8: qlayout_q4_0x8.h, Q4_Kx8: qlayout_q4_Kx8.h, Q5_Kx8: qlayout_q5_Kx8.h,
// Q6_Kx8: qlayout_q6_Kx8.h, Q8_0x8: qlayout_q8_0x8.h), and reading a row's
// blocks back whatever the layout, for the paths that read rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/core/quantize.h"
#include "loom/runtime/cpu/matmul.h"
#include "runtime/cpu/qlayout_q4_0x8.h"
#include "runtime/cpu/qlayout_q4_Kx8.h"
#include "runtime/cpu/qlayout_q5_Kx8.h"
#include "runtime/cpu/qlayout_q6_Kx8.h"
#include "runtime/cpu/qlayout_q8_0x8.h"

namespace loom::cpu::detail {

// Rows per interleaved group of dt, 1 where dt has no interleaved layout.
constexpr int interleaved_group_rows(DType dt) {
  switch (dt) {
    case DType::kQ4_0: return kQ4_0GroupRows;
    case DType::kQ4_K: return kQ4_KGroupRows;
    case DType::kQ5_K: return kQ5_KGroupRows;
    case DType::kQ6_K: return kQ6_KGroupRows;
    case DType::kQ8_0: return kQ8_0GroupRows;
    default: return 1;
  }
}

// The interleaved_group_rows(dt) rows at `rows` → one group at dst.
inline void interleave_group(DType dt, const uint8_t* rows, size_t row_bytes, int64_t blocks, uint8_t* dst) {
  if (dt == DType::kQ4_0) {
    interleave_q4_0x8(rows, row_bytes, blocks, dst);
  } else if (dt == DType::kQ8_0) {
    interleave_q8_0x8(rows, row_bytes, blocks, dst);
  } else if (dt == DType::kQ6_K) {
    interleave_q6_Kx8(rows, row_bytes, blocks, dst);
  } else if (dt == DType::kQ5_K) {
    interleave_q5_Kx8(rows, row_bytes, blocks, dst);
  } else {
    interleave_q4_Kx8(rows, row_bytes, blocks, dst);
  }
}

// Blocks [b0, b0 + nb) of row n of w as stored: in place where the row is stored
// as a row, else copied into `scratch` (nb blocks); returns where they are.
inline const uint8_t* quant_row_blocks(const PackedLinear& w, int64_t n, int64_t b0, int64_t nb, uint8_t* scratch) {
  const DType dt = w.weight_dtype();
  const int64_t group = w.quant_group_rows();
  const size_t block_bytes = dtype_bytes(dt, dtype_block_elements(dt));
  if (group == 1 || n >= w.out_features() / group * group) {
    return w.quant_row(n) + static_cast<size_t>(b0) * block_bytes;
  }
  const uint8_t* first = w.quant_row(n / group * group);
  const int r = static_cast<int>(n % group);
  if (dt == DType::kQ4_0) {
    q4_0x8_row_blocks(first, r, b0, nb, reinterpret_cast<BlockQ4_0*>(scratch));
  } else if (dt == DType::kQ8_0) {
    q8_0x8_row_blocks(first, r, b0, nb, reinterpret_cast<BlockQ8_0*>(scratch));
  } else if (dt == DType::kQ6_K) {
    q6_Kx8_row_blocks(first, r, b0, nb, reinterpret_cast<BlockQ6_K*>(scratch));
  } else if (dt == DType::kQ5_K) {
    q5_Kx8_row_blocks(first, r, b0, nb, reinterpret_cast<BlockQ5_K*>(scratch));
  } else {
    q4_Kx8_row_blocks(first, r, b0, nb, reinterpret_cast<BlockQ4_K*>(scratch));
  }
  return scratch;
}

}  // namespace loom::cpu::detail
