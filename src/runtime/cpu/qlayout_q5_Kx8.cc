#include "runtime/cpu/qlayout_q5_Kx8.h"

#include <cstring>

namespace loom::cpu::detail {
namespace {

// The 8×8 bit matrix in x (row i: byte i, column k: bit k) transposed: bit 8i + k ↔ bit 8k + i.
uint64_t transpose_bits8x8(uint64_t x) {
  uint64_t t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
  x ^= t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
  x ^= t ^ (t << 14);
  t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
  return x ^ t ^ (t << 28);
}

}  // namespace

void interleave_q5_Kx8(const uint8_t* rows, size_t row_bytes, int64_t blocks, uint8_t* dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* out = dst + static_cast<size_t>(b) * kQ5_Kx8BlockBytes;
    uint64_t masks[4][2][4] = {};  // [c][high][h]
    for (int r = 0; r < kQ5_KGroupRows; ++r) {
      const auto* src = reinterpret_cast<const BlockQ5_K*>(rows + static_cast<size_t>(r) * row_bytes) + b;
      put_k4x8_row(out, r, src->d, src->dmin, src->scales, src->qs);
      for (int h = 0; h < 4; ++h) {
        // qh bytes 8h..8h+7 (byte l: bit j is the fifth bit of sub-block j's element
        // 8h + l) → byte j, bit l: row r's eight bits of each mask.
        uint64_t bits;
        std::memcpy(&bits, src->qh + 8 * h, 8);
        bits = transpose_bits8x8(bits);
        for (int j = 0; j < 8; ++j) masks[j / 2][j % 2][h] |= ((bits >> (8 * j)) & 0xFF) << x8_run_slot_offset(r);
      }
    }
    for (int c = 0; c < 4; ++c) {
      for (int h = 0; h < 4; ++h) {
        for (int high = 0; high < 2; ++high) std::memcpy(out + q5_Kx8_mask_offset(c, h, high), &masks[c][high][h], 8);
      }
    }
  }
}

void q5_Kx8_row_blocks(const uint8_t* group, int r, int64_t b0, int64_t nb, BlockQ5_K* dst) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* in = group + static_cast<size_t>(b0 + i) * kQ5_Kx8BlockBytes;
    BlockQ5_K& out = dst[i];
    get_k4x8_row(in, r, out.d, out.dmin, out.scales, out.qs);
    for (int h = 0; h < 4; ++h) {
      uint64_t bits = 0;  // byte j: row r's bits of sub-block j's mask
      for (int j = 0; j < 8; ++j) {
        uint64_t mask;
        std::memcpy(&mask, in + q5_Kx8_mask_offset(j / 2, h, j % 2), 8);
        bits |= ((mask >> x8_run_slot_offset(r)) & 0xFF) << (8 * j);
      }
      bits = transpose_bits8x8(bits);
      std::memcpy(out.qh + 8 * h, &bits, 8);
    }
  }
}

}  // namespace loom::cpu::detail
