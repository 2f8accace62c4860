#include "runtime/cpu/qlayout_q8_0x8.h"

#include <cstring>

namespace loom::cpu::detail {

void interleave_q8_0x8(const uint8_t* rows, size_t row_bytes, int64_t blocks, uint8_t* dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* out = dst + static_cast<size_t>(b) * kQ8_0x8BlockBytes;
    for (int r = 0; r < kQ8_0GroupRows; ++r) {
      const auto* src = reinterpret_cast<const BlockQ8_0*>(rows + static_cast<size_t>(r) * row_bytes) + b;
      std::memcpy(out + 2 * r, &src->d, 2);
      for (int h = 0; h < 4; ++h) std::memcpy(out + q8_0x8_qs_offset(r, h), src->qs + 8 * h, 8);
    }
  }
}

}  // namespace loom::cpu::detail
