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
// LOOM_QUANT_LAYOUT=rows|interleaved as a QuantLayout, kAuto when unset.
QuantLayout quant_layout_override();
struct QdotTable;
// Tests: run `table` whatever the path (it must suit the CPU); null goes back
// to choosing by path.
void force_quantized_kernels(const QdotTable* table);
// The paths batched calls (M ≥ 8) may take, in order: the row kernels, the
// AVX2 tiles, the AVX512-VNNI tiles, the AMX-INT8 tiles (qgemm.h).
enum class QuantGemm { kRows, kAvx2, kVnni, kAmx };
// What batched calls use now: "AMX_INT8" on AVX512 paths where the CPU and OS
// allow AMX tiles, else "AVX512_VNNI_TILES" where the CPU has VNNI, else
// "AVX2_TILES" on AVX2 and AVX512 paths, else quantized_kernels_name(); never
// past the limit.
const char* quantized_gemm_name();
// The best path batched calls may take (default kAmx, all allowed): tests and
// benches run each; LOOM_QUANT_GEMM=amx|vnni|avx2|rows sets it for a process.
void set_quantized_gemm_limit(QuantGemm limit);

}  // namespace loom::cpu::detail
