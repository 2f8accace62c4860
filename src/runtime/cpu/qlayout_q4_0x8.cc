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

}  // namespace loom::cpu::detail
