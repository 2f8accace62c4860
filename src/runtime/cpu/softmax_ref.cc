// Scalar references for softmax / log-softmax, in double.
#include <algorithm>
#include <cmath>
#include <limits>

#include "loom/runtime/cpu/softmax.h"

namespace loom::cpu {

void softmax_ref(const float* x, int64_t rows, int64_t n, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < n; ++i) mx = std::max<double>(mx, xr[i]);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(xr[i] - mx);
    for (int64_t i = 0; i < n; ++i) out[r * n + i] = static_cast<float>(std::exp(xr[i] - mx) / sum);
  }
}

void log_softmax_ref(const float* x, int64_t rows, int64_t n, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < n; ++i) mx = std::max<double>(mx, xr[i]);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(xr[i] - mx);
    const double lse = mx + std::log(sum);
    for (int64_t i = 0; i < n; ++i) out[r * n + i] = static_cast<float>(xr[i] - lse);
  }
}

}  // namespace loom::cpu
