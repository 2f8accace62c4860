// linear() on quantized weights (qlinear.cc): the driver over the qdot kernels.
#pragma once

#include <cstdint>

#include "loom/runtime/cpu/matmul.h"

namespace loom::cpu::detail {

// As linear(); w holds quantized rows. Arguments are already checked.
void linear_quantized(const float* x, int64_t M, int64_t x_stride, const PackedLinear& w, float* y,
                      int64_t y_stride, ThreadPool& pool);

// Which kernel table linear_quantized uses now (active_isa(): AVX512 paths with
// AVX512-VNNI run the VNNI kernels, AVX2 paths the AVX-VNNI ones where the CPU
// has them, else the maddubs ones, SCALAR the reference).
const char* quantized_kernels_name();

// Whether this CPU's decode kernel reads dt faster interleaved (Q4_0, Q4_K, Q6_K and
// Q8_0 on every SIMD path: qdot_<type>x8_avx2, or _avx512 with AVX512BW and VNNI), for
// QuantLayout::kAuto.
bool decode_prefers_interleaved(DType dt);
// What set_auto_quant_layout (matmul.h) last set: kAuto unless a benchmark chose.
QuantLayout quant_layout_override();
struct QdotTable;
// Tests: run `table` whatever the path (it must suit the CPU); null goes back
// to choosing by path.
void force_quantized_kernels(const QdotTable* table);
using cpu::QuantGemm;  // matmul.h
// What batched calls use now: "AMX_INT8" on AVX512 paths where the CPU and OS
// allow AMX tiles, else "AVX512_VNNI_TILES" where the CPU has VNNI, else
// "AVX2_TILES" on AVX2 and AVX512 paths, else quantized_kernels_name(); never
// past the limit.
const char* quantized_gemm_name();
using cpu::set_quantized_gemm_limit;  // matmul.h

}  // namespace loom::cpu::detail
