// The arithmetic of the portable runtime's ops in two flavours: `reference`
// (scalar, double accumulation, the formulas of loom's *_ref kernels) and
// `cpu_simd` (f32 loops with independent partial sums that the compiler
// vectorizes for the CPU it targets). Data movement (KV writes, gathers,
// splits, rope) is shared and lives in program.cc.
#pragma once

#include <cstdint>

namespace lp {

struct Kernels {
  // y[m, n] = x[m, :] · w[n, :] + b[n]  (w is [N, K], b may be null)
  void (*linear)(const float* x, int64_t m, int64_t k, const float* w, const float* b, int64_t n, float* y);
  // the same with w in bf16 (each value widened to f32 exactly as it is read)
  void (*linear_bf16)(const float* x, int64_t m, int64_t k, const uint16_t* w, const float* b, int64_t n, float* y);
  // each group of n values: x * rsqrt(mean(x²) + eps) * (w + offset)
  void (*rms_norm)(const float* x, int64_t groups, int64_t n, const float* w, float eps, float offset, float* out);
  void (*layer_norm)(const float* x, int64_t rows, int64_t n, const float* w, const float* b, float eps, float* out);
  // q·k over d elements
  float (*dot)(const float* a, const float* b, int64_t d);
  // acc[i] += w * v[i]
  void (*axpy)(float w, const float* v, int64_t d, float* acc);
};

// bf16 → f32: the upper half of the f32 bit pattern (exact).
inline float bf16_to_f32(uint16_t v) {
  const uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

const Kernels& reference_kernels();
const Kernels& simd_kernels();

}  // namespace lp
