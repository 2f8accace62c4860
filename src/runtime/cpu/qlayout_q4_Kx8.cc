#include "runtime/cpu/qlayout_q4_Kx8.h"

#include <cstring>

namespace loom::cpu::detail {

void interleave_q4_Kx8(const uint8_t* rows, size_t row_bytes, int64_t blocks, uint8_t* dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* out = dst + static_cast<size_t>(b) * kQ4_Kx8BlockBytes;
    for (int r = 0; r < kQ4_KGroupRows; ++r) {
      const auto* src = reinterpret_cast<const BlockQ4_K*>(rows + static_cast<size_t>(r) * row_bytes) + b;
      put_k4x8_row(out, r, src->d, src->dmin, src->scales, src->qs);
    }
  }
}

}  // namespace loom::cpu::detail
