#include "runtime/cpu/qlayout_q4_0x8.h"

#include <cstring>

namespace loom::cpu::detail {

void interleave_q4_0x8(const uint8_t* rows, size_t row_bytes, int64_t blocks, uint8_t* dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* out = dst + static_cast<size_t>(b) * kQ4_0x8BlockBytes;
    for (int r = 0; r < kQ4_0GroupRows; ++r) {
      const auto* src = reinterpret_cast<const BlockQ4_0*>(rows + static_cast<size_t>(r) * row_bytes) + b;
      std::memcpy(out + 2 * r, &src->d, 2);
      std::memcpy(out + q4_0x8_qs_offset(r, 0), src->qs, 8);
      std::memcpy(out + q4_0x8_qs_offset(r, 1), src->qs + 8, 8);
    }
  }
}

void q4_0x8_row_blocks(const uint8_t* group, int r, int64_t b0, int64_t nb, BlockQ4_0* dst) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* in = group + static_cast<size_t>(b0 + i) * kQ4_0x8BlockBytes;
    std::memcpy(&dst[i].d, in + 2 * r, 2);
    std::memcpy(dst[i].qs, in + q4_0x8_qs_offset(r, 0), 8);
    std::memcpy(dst[i].qs + 8, in + q4_0x8_qs_offset(r, 1), 8);
  }
}

const uint8_t* quant_row_blocks(const PackedLinear& w, int64_t n, int64_t b0, int64_t nb, uint8_t* scratch) {
  const size_t block_bytes = dtype_bytes(w.weight_dtype(), dtype_block_elements(w.weight_dtype()));
  const int64_t group = w.quant_group_rows();
  if (group == 1 || n >= w.out_features() / group * group) {
    return w.quant_row(n) + static_cast<size_t>(b0) * block_bytes;
  }
  q4_0x8_row_blocks(w.quant_row(n / group * group), static_cast<int>(n % group), b0, nb,
                    reinterpret_cast<BlockQ4_0*>(scratch));
  return scratch;
}

}  // namespace loom::cpu::detail
