// How a KV cache stores K and V: an element type for each, and whether each is kept
// Hadamard-rotated. Shared by the stores (runtime's contiguous cache, batching's paged
// cache), the attention op that writes and reads them, and the front ends' flags.
//
// Page layout per type (one layer's page of page_size positions, by kv head):
//  - element types F32, BF16, F16: a V page is [num_kv_heads, page_size, head_dim] elements,
//    a K page transposed [num_kv_heads, head_dim, page_size] (cpu::k_page_index);
//  - block types Q8_0, Q4_0 (ggml's blocks of 32: f16 scale + 32 int8, or + 16 bytes of
//    nibbles): K and V alike are [num_kv_heads, page_size, kv_row_bytes], each position's head
//    vector quantized on its own in ceil(head_dim / 32) blocks (a head_dim that is not a
//    multiple of 32 is padded with zeros, which quantize exactly and add nothing to a dot
//    product). A page therefore holds whole blocks, and rewriting one position (speculative
//    rollback, chunked prefill) never touches another's bytes.
//
// Rotation: with rotate_k (rotate_v) a head vector is multiplied by the normalised
// Walsh–Hadamard matrix H (of the largest power-of-two block dividing head_dim, applied block
// by block) before it is stored. H is orthogonal and its own inverse, so attention rotates the
// query the same way (Hq·Hk = q·k) and applies H once more to the output (Σ p_i H v_i =
// H Σ p_i v_i). Rotation spreads outlier channels over the block, which is what lets 4-bit
// blocks keep their precision (QuaRot; llama.cpp's rotated KV).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "loom/core/dtype.h"
#include "loom/core/status.h"

namespace loom::graph {

struct KvFormat {
  DType k = DType::kF32;
  DType v = DType::kF32;
  bool rotate_k = false;
  bool rotate_v = false;
  bool operator==(const KvFormat&) const = default;
};

// Whether `t` may hold a KV cache: F32, BF16, F16, Q8_0, Q4_0.
inline bool kv_dtype_supported(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16 || t == DType::kQ8_0 || t == DType::kQ4_0;
}
// Element types keep the transposed-K layout; block types are stored by position.
inline bool kv_dtype_is_block(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0; }

// Bytes of one position's head vector of `head_dim` values stored as `t`.
inline size_t kv_row_bytes(DType t, int64_t head_dim) {
  if (kv_dtype_is_block(t))
    return static_cast<size_t>((head_dim + 31) / 32) * dtype_block_bytes(t);
  return static_cast<size_t>(head_dim) * dtype_size(t);
}
// Bytes of one page's K (or V) of kv head count `kv_heads`.
inline size_t kv_page_bytes(DType t, int64_t page_size, int64_t kv_heads, int64_t head_dim) {
  return static_cast<size_t>(page_size) * static_cast<size_t>(kv_heads) * kv_row_bytes(t, head_dim);
}
// K and V bytes of one position of one layer.
inline size_t kv_position_bytes(const KvFormat& f, int64_t kv_heads, int64_t head_dim) {
  return static_cast<size_t>(kv_heads) * (kv_row_bytes(f.k, head_dim) + kv_row_bytes(f.v, head_dim));
}

// The size of the Hadamard blocks used for a head of `head_dim`: the largest power of two
// dividing it (head_dim itself for 64, 128, 256; 32 for 96).
inline int64_t kv_rotation_block(int64_t head_dim) { return head_dim & -head_dim; }

// A KV cache type by name: "float32"/"f32", "bfloat16"/"bf16", "float16"/"f16", "q8_0", "q4_0"
// (llama.cpp's -ctk/-ctv names and loom's). Anything else: InvalidArgument listing them.
Result<DType> kv_dtype_from_name(std::string_view name);
// The name loom prints for a KV type: float32, bfloat16, float16, q8_0, q4_0.
std::string_view kv_dtype_display_name(DType t);

// kv_cache_rotation: "auto" rotates a q4_0 K or V (where it pays), "on" both K and V whatever
// their types, "off" neither.
Result<KvFormat> kv_format_from_names(std::string_view k, std::string_view v, std::string_view rotation);

}  // namespace loom::graph
