#include "runtime/cpu/qlayout_q4_Kx8.h"

#include <cstring>

namespace loom::cpu::detail {

void interleave_q4_Kx8(const uint8_t* rows, size_t row_bytes, int64_t blocks, uint8_t* dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* out = dst + static_cast<size_t>(b) * kQ4_Kx8BlockBytes;
    for (int r = 0; r < kQ4_KGroupRows; ++r) {
      const auto* src = reinterpret_cast<const BlockQ4_K*>(rows + static_cast<size_t>(r) * row_bytes) + b;
      std::memcpy(out + 2 * r, &src->d, 2);
      std::memcpy(out + 16 + 2 * r, &src->dmin, 2);
      for (int t = 0; t < 12; ++t) out[kQ4_Kx8ScalesOffset + 8 * t + r] = src->scales[t];
      for (int c = 0; c < 4; ++c) {
        for (int h = 0; h < 4; ++h) std::memcpy(out + q4_Kx8_qs_offset(r, c, h), src->qs + 32 * c + 8 * h, 8);
      }
    }
  }
}

}  // namespace loom::cpu::detail
