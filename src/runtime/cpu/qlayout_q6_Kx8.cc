#include "runtime/cpu/qlayout_q6_Kx8.h"

#include <cstring>

namespace loom::cpu::detail {

void interleave_q6_Kx8(const uint8_t* rows, size_t row_bytes, int64_t blocks, uint8_t* dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* out = dst + static_cast<size_t>(b) * kQ6_Kx8BlockBytes;
    for (int r = 0; r < kQ6_KGroupRows; ++r) {
      const auto* src = reinterpret_cast<const BlockQ6_K*>(rows + static_cast<size_t>(r) * row_bytes) + b;
      std::memcpy(out + 2 * r, &src->d, 2);
      for (int s = 0; s < 16; ++s) std::memcpy(out + q6_Kx8_scale_offset(r, s), &src->scales[s], 1);
      for (int p = 0; p < 16; ++p) std::memcpy(out + q6_Kx8_ql_offset(r, p), src->ql + 8 * p, 8);
      for (int p = 0; p < 8; ++p) std::memcpy(out + q6_Kx8_qh_offset(r, p), src->qh + 8 * p, 8);
    }
  }
}

}  // namespace loom::cpu::detail
