// Row normalizations (f32): RMSNorm as Transformers computes it, its fused residual-add form,
// and LayerNorm. Rows are independent; large calls are split across the pool by rows.
#pragma once

#include <cstdint>

#include "loom/core/thread_pool.h"

namespace loom::cpu {

// out[r] = (x[r] * rsqrt(mean(x[r]^2) + eps)) * (weight_offset + weight), computed in f32 in
// Hugging Face's order. weight_offset is 0, or 1 for Gemma's (1 + w). A null weight means no
// scaling at all (factor 1, offset ignored). out may alias x.
void rmsnorm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float weight_offset, float* out,
             ThreadPool& pool);
// Same with row strides in elements (e.g. per-head q/k norm inside a fused projection).
void rmsnorm_strided(const float* x, int64_t x_stride, int64_t rows, int64_t n, const float* weight, float eps,
                     float weight_offset, float* out, int64_t out_stride, ThreadPool& pool);
// sum = residual + x; out = rmsnorm(sum). The pre-norm block's "add the sublayer output, then
// normalize for the next sublayer" in one pass over memory: each row's sum is normalized while
// it is still in L1. The results are bitwise those of add() then rmsnorm() (same f32 sums,
// same accumulation order), so fusing changes no output. sum may alias residual or x; out may
// alias x, never sum.
void add_rmsnorm(const float* residual, const float* x, int64_t rows, int64_t n, const float* weight, float eps,
                 float weight_offset, float* sum, float* out, ThreadPool& pool);
// out[r] = (x[r] - mean) * rsqrt(var + eps) * weight + bias, biased variance like torch.nn.LayerNorm.
// weight and bias may be null (ones / zeros). out may alias x.
void layernorm(const float* x, int64_t rows, int64_t n, const float* weight, const float* bias, float eps, float* out,
               ThreadPool& pool);

// Scalar references, statistics accumulated in double.
void rmsnorm_ref(const float* x, int64_t x_stride, int64_t rows, int64_t n, const float* weight, float eps,
                 float weight_offset, float* out, int64_t out_stride);
void add_rmsnorm_ref(const float* residual, const float* x, int64_t rows, int64_t n, const float* weight, float eps,
                     float weight_offset, float* sum, float* out);
void layernorm_ref(const float* x, int64_t rows, int64_t n, const float* weight, const float* bias, float eps,
                   float* out);

}  // namespace loom::cpu
