// Batched linear on quantized weights, 16 outputs × 16 activation rows per tile
// (qgemm_tiles.h), with the products on AMX-INT8 (qgemm_amx.cc) or AVX512-VNNI
// (qgemm_avx512vnni.cc), or 16 outputs × 8 rows in AVX2 (qgemm_avx2.cc), over the
// same unpacked weights (qgemm_weights.h): the same exact int32 block sums and the
// same f32 steps, per output and block, as the qdot row kernels (qdot_kernels.h),
// so their rows are bitwise the row kernels'.
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/core/thread_pool.h"
#include "loom/runtime/cpu/matmul.h"

namespace loom::cpu::detail {

// AMX-INT8 tiles usable by this process: the CPU has them, the OS saves their
// state and granted the tile data permission (requested once, on first call).
bool amx_int8_usable();
// The CPU has AVX-512 F/BW/DQ/VL and VNNI.
bool avx512_vnni_usable();
// The CPU has AVX2, FMA and F16C.
bool avx2_tiles_usable();

// y = act · wᵀ (+ bias) for M quantized activation rows (ActBlockQ8x32 or
// ActBlockQ8K blocks as the weight type pairs with, act_row_bytes apart).
void linear_quantized_amx(const uint8_t* act, size_t act_row_bytes, int64_t M, const PackedLinear& w, float* y,
                          int64_t y_stride, ThreadPool& pool);
void linear_quantized_avx512vnni(const uint8_t* act, size_t act_row_bytes, int64_t M, const PackedLinear& w,
                                 float* y, int64_t y_stride, ThreadPool& pool);
void linear_quantized_avx2(const uint8_t* act, size_t act_row_bytes, int64_t M, const PackedLinear& w, float* y,
                           int64_t y_stride, ThreadPool& pool);

}  // namespace loom::cpu::detail
