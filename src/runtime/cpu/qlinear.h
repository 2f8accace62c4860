// linear() on quantized weights (qlinear.cc): the driver over the qdot kernels.
#pragma once

#include <cstdint>

#include "loom/runtime/cpu/matmul.h"

namespace loom::cpu::detail {

// As linear(); w holds quantized rows. Arguments are already checked.
void linear_quantized(const float* x, int64_t M, int64_t x_stride, const PackedLinear& w, float* y,
                      int64_t y_stride, ThreadPool& pool);

// Which kernel table linear_quantized uses now (active_isa(): AVX512 paths with
// AVX512-VNNI run the VNNI kernels, AVX2 the maddubs ones, SCALAR the reference).
const char* quantized_kernels_name();

}  // namespace loom::cpu::detail
