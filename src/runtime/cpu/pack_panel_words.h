// The transposition behind PackedLinear's bf16 panels: 32 weight rows of `words`
// 32-bit words each (a bf16 pair is one word) become [words][32], so a panel's k
// pair for its 32 rows is one 128-byte line. Packing the 1B bf16 model spent a
// third of its load in the scalar loop (writes 128 bytes apart); the AVX-512
// version moves 16×16 blocks through registers.
#pragma once

#include <cstdint>

namespace loom::cpu::detail {

// Row j of the panel at src + j * words; dst holds words * 32 words.
void transpose_panel_words_scalar(const uint32_t* src, int64_t words, uint32_t* dst);
void transpose_panel_words_avx512(const uint32_t* src, int64_t words, uint32_t* dst);

}  // namespace loom::cpu::detail
