// Helpers for weights tests: tensors whose every element says where it came
// from, so a test can compute any op's expected output by index arithmetic.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "loom/core/tensor.h"

namespace loom::testing {

// F32: element i holds float(i + base). BF16/F16/I32: the raw bits hold i + base
// (modulo the type's width): only bytes move, so any bit pattern is fine.
inline Tensor iota(DType dtype, Shape shape, int64_t base = 0) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = i + base;
    switch (dtype) {
      case DType::kF32: t.data_as<float>()[i] = static_cast<float>(v); break;
      case DType::kBF16:
      case DType::kF16: t.data_as<uint16_t>()[i] = static_cast<uint16_t>(v); break;
      default: t.data_as<int32_t>()[i] = static_cast<int32_t>(v); break;
    }
  }
  return t;
}

// The value iota() stored at flat index i (as an integer).
inline int64_t at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return static_cast<int64_t>(t.data_as<float>()[i]);
    case DType::kBF16:
    case DType::kF16: return t.data_as<uint16_t>()[i];
    default: return t.data_as<int32_t>()[i];
  }
}

inline bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

}  // namespace loom::testing
