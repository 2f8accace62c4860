#include "runtime/cpu/pack_panel_words.h"

#include "runtime/cpu/matmul_kernels.h"

namespace loom::cpu::detail {

void transpose_panel_words_scalar(const uint32_t* src, int64_t words, uint32_t* dst) {
  // Row by row: sequential reads, and the panel's lines stay in L2.
  for (int64_t j = 0; j < kNr; ++j) {
    const uint32_t* row = src + j * words;
    for (int64_t w = 0; w < words; ++w) dst[w * kNr + j] = row[w];
  }
}

}  // namespace loom::cpu::detail
