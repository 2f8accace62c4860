// Reference linear: double accumulation straight from the [N, K] weight, no
// packing, no SIMD — what the optimized paths are tested against. Quantized
// weights are dequantized (core/quantize.h) and x stays f32.
#include <string>
#include <vector>

#include "loom/runtime/cpu/matmul.h"

namespace loom::cpu {

void linear_ref(const float* x, int64_t M, int64_t K, const Tensor& weight, const Tensor* bias, float* y) {
  if (!weight.defined() || weight.rank() != 2 || weight.dim(1) != K ||
      !(dtype_is_float(weight.dtype()) ||
        (dtype_is_quantized(weight.dtype()) && K % dtype_block_elements(weight.dtype()) == 0))) {
    throw Error(invalid_argument("linear_ref: weight must be a float or quantized [N, " + std::to_string(K) +
                                 "] tensor (K a multiple of the block), got " +
                                 (weight.defined() ? weight.describe() : std::string("undefined"))));
  }
  const int64_t N = weight.dim(0);
  if (bias && (!bias->defined() || bias->rank() != 1 || bias->dim(0) != N || !dtype_is_float(bias->dtype()))) {
    throw Error(invalid_argument("linear_ref: bias must be a float [" + std::to_string(N) + "] tensor, got " +
                                 (bias->defined() ? bias->describe() : std::string("undefined"))));
  }
  if (M < 0 || K < 0) throw Error(invalid_argument("linear_ref: negative M or K"));
  const std::vector<float> w = weight.to_f32_vector();
  const std::vector<float> b = bias ? bias->to_f32_vector() : std::vector<float>();
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(x[m * K + k]) * w[n * K + k];
      if (bias) acc += b[n];
      y[m * N + n] = static_cast<float>(acc);
    }
  }
}

}  // namespace loom::cpu
