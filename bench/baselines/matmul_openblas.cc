#include <cblas.h>

#include <algorithm>
#include <string>

#include "baselines/matmul_baselines.h"

namespace loom::cpu::baseline {

Result<std::unique_ptr<OpenblasLinear>> OpenblasLinear::create(const Tensor& weight, const Tensor* bias) {
  if (!weight.defined() || weight.rank() != 2 || !dtype_is_float(weight.dtype())) {
    return invalid_argument("OpenblasLinear: weight must be a float [N, K] tensor");
  }
  std::unique_ptr<OpenblasLinear> out(new OpenblasLinear());
  out->n_ = weight.dim(0);
  out->k_ = weight.dim(1);
  out->w_ = weight.to_f32_vector();
  if (bias) {
    if (!bias->defined() || bias->numel() != out->n_) return invalid_argument("OpenblasLinear: bias must be [N]");
    out->b_ = bias->to_f32_vector();
  }
  return out;
}

void OpenblasLinear::run(const float* x, int64_t M, float* y) {
  const blasint N = static_cast<blasint>(n_), K = static_cast<blasint>(k_);
  if (!b_.empty()) {
    for (int64_t m = 0; m < M; ++m) std::copy(b_.begin(), b_.end(), y + m * N);
  }
  const float beta = b_.empty() ? 0.0f : 1.0f;
  if (M == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, w_.data(), K, x, 1, beta, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(M), N, K, 1.0f, x, K, w_.data(), K,
                beta, y, N);
  }
}

void OpenblasLinear::set_num_threads(int n) { openblas_set_num_threads(n); }

std::string OpenblasLinear::core_name() {
  const char* name = openblas_get_corename();
  return name ? name : "?";
}

}  // namespace loom::cpu::baseline
