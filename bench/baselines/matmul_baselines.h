// Library implementations of the same linear layer, kept so the benchmark can
// justify loom's own kernels against them (bench/matmul_bench.cc), `loom bench`
// can bound prefill by a library GEMM, and the tests can hold them to the same
// reference. No layer of loom uses them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/core/tensor.h"

namespace loom::cpu::baseline {

// oneDNN matmul with the weights reordered once into the blocked layout oneDNN
// picks (format_tag::any) and one primitive per M. BF16 weights take x rounded
// to bf16, as PyTorch's oneDNN path does. oneDNN runs its own OpenMP threads;
// call it from one thread. Unsupported when loom is built without oneDNN.
class OnednnLinear {
 public:
  static Result<std::unique_ptr<OnednnLinear>> create(const Tensor& weight /*F32|BF16 [N,K]*/, const Tensor* bias);
  ~OnednnLinear();
  // y[M, N] = x[M, K] · Wᵀ + b, dense rows.
  void run(const float* x, int64_t M, float* y);
  static bool available();

 private:
  OnednnLinear() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// OpenBLAS sgemm/sgemv on an f32 copy of the weights (bf16/f16 are widened at
// creation, doubling their memory). Threads: OpenBLAS's own pool.
class OpenblasLinear {
 public:
  static Result<std::unique_ptr<OpenblasLinear>> create(const Tensor& weight, const Tensor* bias);
  void run(const float* x, int64_t M, float* y);
  static void set_num_threads(int n);
  // The kernel family OpenBLAS picked ("SkylakeX", …). Debian's DYNAMIC_ARCH
  // build does not know recent Xeons and falls back to "Prescott" (SSE3, ~6x
  // slower); OPENBLAS_CORETYPE=COOPERLAKE selects the AVX-512 kernels.
  static std::string core_name();

 private:
  int64_t n_ = 0, k_ = 0;
  std::vector<float> w_, b_;
};

}  // namespace loom::cpu::baseline

namespace loom::cpu {

// GFLOP/s of oneDNN's matmul y[M, N] = x[M, K]·Wᵀ with F32 or BF16 weights
// (bf16 weights take x rounded to bf16, as PyTorch does), best of `repeats`
// after a warm-up; oneDNN uses its own OpenMP threads. `loom bench` bounds
// prefill by it. Unsupported when built without oneDNN.
Result<double> measure_onednn_matmul_gflops(DType weight_dtype, int64_t M, int64_t N, int64_t K, int repeats = 3);

}  // namespace loom::cpu
