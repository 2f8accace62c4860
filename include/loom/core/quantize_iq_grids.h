// The IQ types' codebooks, as llama.cpp's ggml-common.h publishes them: each row
// is the 8 (IQ2, IQ1) or 4 (IQ3) magnitudes one index selects. The values live in
// quantize_iq_grids.cc, generated from llama.cpp's own library.
#pragma once

#include <cstdint>

namespace loom {

extern const uint8_t iq2xxs_grid[256][8];
extern const uint8_t iq2xs_grid[512][8];
extern const uint8_t iq2s_grid[1024][8];
extern const uint8_t iq3xxs_grid[256][4];
extern const uint8_t iq3s_grid[512][4];
extern const int8_t iq1s_grid[2048][8];  // −1, 0, 1; IQ1_S and IQ1_M

}  // namespace loom
