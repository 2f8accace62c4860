// Shared by the linear-layer tests (float and quantized weights): the code paths
// this CPU can run, and random weights and activations.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/core/cpu_features.h"

namespace loom::cpu::test_util {

inline std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// An [N, K] weight of N(0, 0.5²) values, converted to `dt` (float or quantized).
inline Tensor random_weight(int64_t N, int64_t K, DType dt, uint32_t seed) {
  return Tensor::from_f32(random_floats(static_cast<size_t>(N * K), seed, 0.5f), {N, K}).to(dt);
}

}  // namespace loom::cpu::test_util
