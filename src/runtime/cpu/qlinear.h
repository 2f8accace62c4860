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
// What batched calls (M ≥ 8) use: "AMX_INT8" on AVX512 paths where the CPU and
// OS allow AMX tiles and it is allowed, else quantized_kernels_name().
const char* quantized_gemm_name();
// Lets batched calls use AMX (the default) or not: tests and benches run both;
// LOOM_QUANT_AMX=0 starts a process with it off.
void set_quantized_amx_allowed(bool allowed);

}  // namespace loom::cpu::detail
