// Reading and writing one head vector of a KV page of any KV type, and the Hadamard rotation
// (attention.h). The attention op writes through kv_store_row; the reference kernel and the
// tests read through kv_stored_value; the optimized kernel reads block rows itself.
#include <cmath>
#include <cstring>
#include <vector>

#include "loom/core/quantize.h"
#include "loom/runtime/cpu/attention.h"

namespace loom::cpu {

float kv_stored_value(const void* page, DType dtype, bool key, int64_t off, int64_t kvh, int64_t d, int64_t page_size,
                      int64_t head_dim) {
  if (!graph::kv_dtype_is_block(dtype))
    return kv_element(page,
                      key ? k_page_index(off, kvh, d, page_size, head_dim) : v_page_index(off, kvh, d, page_size, head_dim),
                      dtype);
  const void* row = kv_block_row(page, off, kvh, page_size, head_dim, dtype);
  const int64_t b = d / 32, j = d % 32;
  if (dtype == DType::kQ8_0) {
    const BlockQ8_0& blk = static_cast<const BlockQ8_0*>(row)[b];
    return f16_to_f32(blk.d) * static_cast<float>(blk.qs[j]);
  }
  const BlockQ4_0& blk = static_cast<const BlockQ4_0*>(row)[b];
  const int q = j < 16 ? (blk.qs[j] & 0x0F) : (blk.qs[j - 16] >> 4);
  return f16_to_f32(blk.d) * static_cast<float>(q - 8);
}

void kv_store_row(void* page, DType dtype, bool key, int64_t off, int64_t kvh, int64_t page_size, int64_t head_dim,
                  const float* src) {
  if (graph::kv_dtype_is_block(dtype)) {
    void* row = const_cast<void*>(kv_block_row(page, off, kvh, page_size, head_dim, dtype));
    const int64_t padded = (head_dim + 31) / 32 * 32;
    if (padded == head_dim) return quantize_row_ref(dtype, src, row, head_dim);
    float buf[512];
    float* tmp = buf;
    std::vector<float> big;
    if (padded > 512) {
      big.resize(static_cast<size_t>(padded));
      tmp = big.data();
    }
    std::memcpy(tmp, src, static_cast<size_t>(head_dim) * sizeof(float));
    std::memset(tmp + head_dim, 0, static_cast<size_t>(padded - head_dim) * sizeof(float));
    return quantize_row_ref(dtype, tmp, row, padded);
  }
  if (!key && dtype == DType::kF32) {
    std::memcpy(static_cast<float*>(page) + v_page_index(off, kvh, 0, page_size, head_dim), src,
                static_cast<size_t>(head_dim) * sizeof(float));
    return;
  }
  for (int64_t d = 0; d < head_dim; ++d) {
    const int64_t i = key ? k_page_index(off, kvh, d, page_size, head_dim) : v_page_index(off, kvh, d, page_size, head_dim);
    switch (dtype) {
      case DType::kBF16: static_cast<uint16_t*>(page)[i] = f32_to_bf16(src[d]); break;  // rounded once, nearest even
      case DType::kF16: static_cast<uint16_t*>(page)[i] = f32_to_f16(src[d]); break;
      default: static_cast<float*>(page)[i] = src[d]; break;
    }
  }
}

void kv_rotate(float* x, int64_t head_dim) {
  const int64_t n = graph::kv_rotation_block(head_dim);
  if (n < 2) return;
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (float* blk = x; blk < x + head_dim; blk += n) {
    // In-place fast Walsh–Hadamard transform (butterflies of width h = 1, 2, 4, ...).
    for (int64_t h = 1; h < n; h *= 2)
      for (int64_t i = 0; i < n; i += 2 * h)
        for (int64_t j = i; j < i + h; ++j) {
          const float a = blk[j], b = blk[j + h];
          blk[j] = a + b;
          blk[j + h] = a - b;
        }
    for (int64_t j = 0; j < n; ++j) blk[j] *= norm;
  }
}

}  // namespace loom::cpu
