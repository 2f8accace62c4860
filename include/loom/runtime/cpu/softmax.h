// Numerically stable softmax and log-softmax over the rows of a contiguous [rows, n] f32 matrix
// (attention probabilities outside the fused kernel, sampling distributions, logprobs).
#pragma once

#include <cstdint>

#include "loom/core/thread_pool.h"

namespace loom::cpu {

// out[r, i] = exp(x[r, i] - max_r) / sum_j exp(x[r, j] - max_r). out may alias x.
void softmax(const float* x, int64_t rows, int64_t n, float* out, ThreadPool& pool);
// out[r, i] = (x[r, i] - max_r) - log(sum_j exp(x[r, j] - max_r)), PyTorch's order. out may alias x.
void log_softmax(const float* x, int64_t rows, int64_t n, float* out, ThreadPool& pool);

// Scalar references (double accumulation).
void softmax_ref(const float* x, int64_t rows, int64_t n, float* out);
void log_softmax_ref(const float* x, int64_t rows, int64_t n, float* out);

}  // namespace loom::cpu
