// Shared by the linear-layer tests (float and quantized weights): the code paths
// this CPU can run, and random weights and activations.
#pragma once

#include <cstdint>
#include <cstring>
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

// Sets a block's scales (ggml-common.h's layouts) to the f16 `bits` (MXFP4's E8M0 to
// `e8m0`), for a type loom reads but does not quantize to.
inline void set_block_scales(DType dt, uint8_t* blk, uint16_t bits, uint8_t e8m0) {
  auto put = [&](size_t at) { std::memcpy(blk + at, &bits, 2); };
  switch (dt) {
    case DType::kQ4_1: case DType::kQ5_1: put(0); put(2); break;
    case DType::kQ2_K: put(80); put(82); break;
    case DType::kQ3_K: put(108); break;
    case DType::kTQ1_0: put(52); break;
    case DType::kTQ2_0: put(64); break;
    case DType::kMXFP4: blk[0] = e8m0; break;
    case DType::kIQ1_M:  // the f16 scale is the top nibble of each of the four u16 scale words
      for (int k = 0; k < 4; ++k) {
        uint16_t w;
        std::memcpy(&w, blk + 48 + 2 * k, 2);
        w = static_cast<uint16_t>((w & 0x0FFF) | (((bits >> (4 * k)) & 0xF) << 12));
        std::memcpy(blk + 48 + 2 * k, &w, 2);
      }
      break;
    default: put(0); break;
  }
}

// Random blocks: random bytes (every level, grid row, sign and sub-block scale), with
// each scale set to ±2^-12..2^-5 (MXFP4's to 2^-10..2^-3) so the weights are finite and
// of a usual size.
inline Tensor random_blocks(int64_t N, int64_t K, DType dt, uint32_t seed) {
  Tensor t = Tensor::empty(dt, {N, K});
  auto* p = static_cast<uint8_t*>(t.data());
  std::mt19937 rng(seed);
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  const size_t block = dtype_block_bytes(dt);
  for (size_t b = 0; b < t.nbytes() / block; ++b) {
    const uint16_t exponent = static_cast<uint16_t>(3 + rng() % 8);
    const uint16_t bits = static_cast<uint16_t>((rng() & 1) << 15 | exponent << 10 | (rng() & 0x3FF));
    set_block_scales(dt, p + b * block, bits, static_cast<uint8_t>(117 + rng() % 8));
  }
  return t;
}

// An [N, K] weight of N(0, 0.5²) values, converted to `dt` (float or quantized); random
// blocks (random_blocks) for a type loom does not quantize to.
inline Tensor random_weight(int64_t N, int64_t K, DType dt, uint32_t seed) {
  const Tensor f = Tensor::from_f32(random_floats(static_cast<size_t>(N * K), seed, 0.5f), {N, K});
  switch (dt) {
    case DType::kF32: case DType::kBF16: case DType::kF16: case DType::kQ8_0: case DType::kQ4_0: case DType::kQ4_K:
    case DType::kQ5_K: case DType::kQ6_K:
      return f.to(dt);
    default: return random_blocks(N, K, dt, seed);
  }
}

}  // namespace loom::cpu::test_util
