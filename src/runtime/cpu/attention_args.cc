// Argument checks shared by paged_attention and paged_attention_ref, so that both kernels can
// run without bounds checks in their loops.
#include <algorithm>
#include <cmath>
#include <string>

#include "loom/runtime/cpu/attention.h"

namespace loom::cpu {

Status check_paged_attention_args(const float* q, int64_t q_stride, const AttentionSequence* seqs, int64_t num_seqs,
                                  const AttentionParams& p, const float* out, int64_t out_stride) {
  // Messages are built only on an error: a decode step allocates nothing.
  const char* const where = "paged_attention: ";
  if (p.num_q_heads < 1 || p.num_kv_heads < 1 || p.head_dim < 1)
    return invalid_argument(std::string(where) + "num_q_heads, num_kv_heads and head_dim must be positive (got " +
                            std::to_string(p.num_q_heads) + ", " + std::to_string(p.num_kv_heads) + ", " +
                            std::to_string(p.head_dim) + ")");
  if (p.num_q_heads % p.num_kv_heads != 0)
    return invalid_argument(std::string(where) + "num_q_heads " + std::to_string(p.num_q_heads) +
                            " is not a multiple of num_kv_heads " + std::to_string(p.num_kv_heads));
  if (p.sliding_window < 0) return invalid_argument(std::string(where) + "sliding_window is negative");
  if (!(p.softcap >= 0.0f) || !std::isfinite(p.softcap))
    return invalid_argument(std::string(where) + "softcap must be 0 (none) or a positive finite value");
  if (!std::isfinite(p.scale)) return invalid_argument(std::string(where) + "scale is not finite");
  const int64_t row = p.num_q_heads * p.head_dim;
  if (q_stride < row || out_stride < row)
    return invalid_argument(std::string(where) + "q_stride " + std::to_string(q_stride) + " / out_stride " +
                            std::to_string(out_stride) + " shorter than num_q_heads * head_dim = " +
                            std::to_string(row));
  if (num_seqs < 0) return invalid_argument(std::string(where) + "num_seqs is negative");
  if (num_seqs > 0 && seqs == nullptr) return invalid_argument(std::string(where) + "seqs is null");
  bool any_rows = false;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const AttentionSequence& seq = seqs[s];
    auto ws = [&] { return std::string(where) + "sequence " + std::to_string(s) + ": "; };
    if (seq.q_begin < 0 || seq.q_len < 0) return invalid_argument(ws() + "q_begin and q_len must be non-negative");
    if (seq.q_len == 0) continue;
    any_rows = true;
    if (seq.positions == nullptr) return invalid_argument(ws() + "positions is null");
    const KvPages& kv = seq.kv;
    if (kv.page_size < 1) return invalid_argument(ws() + "page_size must be positive");
    if (kv.num_pages < 0 || kv.num_tokens < 0) return invalid_argument(ws() + "num_pages and num_tokens must be non-negative");
    if (kv.num_tokens > kv.num_pages * kv.page_size)
      return invalid_argument(ws() + "num_tokens " + std::to_string(kv.num_tokens) + " exceeds num_pages * page_size = " +
                              std::to_string(kv.num_pages * kv.page_size));
    if (kv.k_pages == nullptr || kv.v_pages == nullptr) return invalid_argument(ws() + "k_pages or v_pages is null");
    if (!graph::kv_dtype_supported(kv.format.k) || !graph::kv_dtype_supported(kv.format.v))
      return invalid_argument(ws() + "KV types " + std::string(dtype_name(kv.format.k)) + "/" +
                              std::string(dtype_name(kv.format.v)) +
                              " are not supported (F32, BF16, F16, Q8_0 or Q4_0 for each of K and V)");
    int64_t min_pos = kv.num_tokens, max_pos = -1;
    for (int64_t t = 0; t < seq.q_len; ++t) {
      const int64_t pos = seq.positions[t];
      if (pos < 0 || pos >= kv.num_tokens)
        return out_of_range(ws() + "position " + std::to_string(pos) + " of token " + std::to_string(t) +
                            " outside the " + std::to_string(kv.num_tokens) + " tokens in the KV cache");
      min_pos = std::min(min_pos, pos);
      max_pos = std::max(max_pos, pos);
    }
    const int64_t first = p.sliding_window > 0 ? std::max<int64_t>(0, min_pos - p.sliding_window + 1) : 0;
    for (int64_t pg = first / kv.page_size; pg <= max_pos / kv.page_size; ++pg) {
      if (kv.k_pages[pg] == nullptr || kv.v_pages[pg] == nullptr)
        return invalid_argument(ws() + "page " + std::to_string(pg) + " (positions " + std::to_string(pg * kv.page_size) +
                                "..) is null but positions " + std::to_string(first) + ".." +
                                std::to_string(max_pos) + " are attended");
    }
  }
  if (any_rows && (q == nullptr || out == nullptr)) return invalid_argument(std::string(where) + "q or out is null");
  return Status::Ok();
}

}  // namespace loom::cpu
