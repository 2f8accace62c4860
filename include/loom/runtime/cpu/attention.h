// Causal attention of new query tokens over a paged KV cache (f32, bf16, f16, q8_0 or q4_0 for K
// and V each, optionally Hadamard-rotated: graph/kv_format.h), for prefill, chunked
// prefill and batched decode in one call. The optimized kernel streams K/V page by page with
// an online (flash-attention style) softmax: no dense mask, no gathering of pages into a
// contiguous copy, so a decode step costs one read of the live K/V and nothing more.
#pragma once

#include <cstdint>

#include "loom/core/dtype.h"
#include "loom/core/status.h"
#include "loom/core/thread_pool.h"
#include "loom/graph/kv_format.h"

namespace loom::cpu {

// K/V of one sequence for one layer, stored in fixed-size pages. Logical page p holds positions
// [p*page_size, (p+1)*page_size). K and V each have their type (format.k / format.v: F32; BF16
// or F16 to halve what a decode step reads; Q8_0 or Q4_0 blocks for a quarter or less; scores
// and sums stay f32), kv-head-major, so the part of a page one kv head reads is one contiguous
// run. Element types: a V page is [num_kv_heads, page_size, head_dim]; a K page is transposed,
// [num_kv_heads, head_dim, page_size], so the scores of consecutive positions are one vector
// load per head dim (k_page_index / v_page_index, in elements). Block types: K and V pages are
// [num_kv_heads, page_size] rows of kv_row_bytes (kv_block_row), one head vector each.
// Entries may be null for pages no longer needed (sliding-window ring): never read.
struct KvPages {
  const void* const* k_pages;
  const void* const* v_pages;
  int64_t num_pages;
  int64_t page_size;
  int64_t num_tokens;  // positions [0, num_tokens) hold written K/V
  graph::KvFormat format;
};

// Element i of a page of an element type (F32, BF16, F16) as f32.
inline float kv_element(const void* page, int64_t i, DType dtype) {
  if (dtype == DType::kBF16) return bf16_to_f32(static_cast<const uint16_t*>(page)[i]);
  if (dtype == DType::kF16) return f16_to_f32(static_cast<const uint16_t*>(page)[i]);
  return static_cast<const float*>(page)[i];
}

// The row of (position-in-page off, kv head kvh) in a page of a block type.
inline const void* kv_block_row(const void* page, int64_t off, int64_t kvh, int64_t page_size, int64_t head_dim,
                                DType dtype) {
  return static_cast<const char*>(page) +
         static_cast<size_t>(kvh * page_size + off) * graph::kv_row_bytes(dtype, head_dim);
}

// Value d of the head vector (off, kvh) of a K (key = true) or V page of any KV type, as
// stored (rotated if the cache rotates; dequantized for a block type). Reference and tests.
float kv_stored_value(const void* page, DType dtype, bool key, int64_t off, int64_t kvh, int64_t d, int64_t page_size,
                      int64_t head_dim);
// Writes the head vector `src` (head_dim values, already rotated if the cache rotates) of
// (off, kvh) into a K (key = true) or V page: rounded to BF16/F16, or quantized block by
// block as ggml's quantize_row_*_ref does (padded with zeros to whole blocks).
void kv_store_row(void* page, DType dtype, bool key, int64_t off, int64_t kvh, int64_t page_size, int64_t head_dim,
                  const float* src);
// x ← H x for the normalised Walsh–Hadamard matrix H of blocks of kv_rotation_block(head_dim),
// applied to each block of the head_dim values at x. H·H = I.
void kv_rotate(float* x, int64_t head_dim);

// Element (position-in-page off, kv head kvh, dim d) of a K / V page.
inline int64_t k_page_index(int64_t off, int64_t kvh, int64_t d, int64_t page_size, int64_t head_dim) {
  return (kvh * head_dim + d) * page_size + off;
}
inline int64_t v_page_index(int64_t off, int64_t kvh, int64_t d, int64_t page_size, int64_t head_dim) {
  return (kvh * page_size + off) * head_dim + d;
}

struct AttentionSequence {
  int64_t q_begin;           // first row of this sequence's queries in q / out
  int64_t q_len;             // number of new tokens (1 for decode)
  const int32_t* positions;  // absolute positions of the q_len new tokens
  KvPages kv;
};

struct AttentionParams {
  int64_t num_q_heads, num_kv_heads, head_dim;
  float scale;              // multiplies q·k (usually 1/sqrt(head_dim))
  int64_t sliding_window;   // 0 = none
  float softcap;            // 0 = none; else scores = softcap * tanh(scores / softcap)
  // [num_q_heads] or null: gpt-oss's attention sinks, one logit per q head that joins
  // the softmax's denominator (exp(sink) / (exp(sink) + Σ exp(score))) and reads no value.
  const float* sinks = nullptr;
};

// q: [total_q, num_q_heads, head_dim] with row stride q_stride (elements per token), out likewise.
// Causal: the query at absolute position p attends to kv positions [max(0, p - sliding_window + 1), p]
// (Transformers' sliding window: `q_idx - kv_idx < sliding_window`, so the window holds
// sliding_window positions including p itself). GQA: q head h uses kv head
// h / (num_q_heads / num_kv_heads). out must not overlap q.
// Bad arguments (see check_paged_attention_args) throw loom::Error naming the sequence and field.
void paged_attention(const float* q, int64_t q_stride, const AttentionSequence* seqs, int64_t num_seqs,
                     const AttentionParams& p, float* out, int64_t out_stride, ThreadPool& pool);

// Scalar reference with the same contract: one query row at a time, two passes (max, then
// exp-sum and weighted V) accumulated in double over K/V dequantized to f32 (kv_stored_value),
// the query and output rotated with kv_rotate when the cache rotates. Single-threaded.
void paged_attention_ref(const float* q, int64_t q_stride, const AttentionSequence* seqs, int64_t num_seqs,
                         const AttentionParams& p, float* out, int64_t out_stride);

// What both kernels validate before touching memory: head counts and strides, every position
// in [0, kv.num_tokens), kv.num_tokens within num_pages * page_size, and a non-null K and V page
// for every position in [min(pos) - window + 1, max(pos)] of each sequence (the range the
// kernels read).
Status check_paged_attention_args(const float* q, int64_t q_stride, const AttentionSequence* seqs, int64_t num_seqs,
                                  const AttentionParams& p, const float* out, int64_t out_stride);

}  // namespace loom::cpu
