// Rotary position embeddings (RoPE) in Hugging Face's rotate_half (GPT-NeoX) convention, and the
// inverse frequencies + attention scaling of Transformers' rope types (modeling_rope_utils.py).
//
// Angles are computed the way PyTorch does in Transformers' rotary modules: inv_freq (f32) ×
// position (f32) as one f32 product, then cos/sin in f32, each multiplied by attention_scaling;
// the rotation is x * cos + rotate_half(x) * sin with separately rounded products. So loom's
// rotated q/k follow Hugging Face to within the last bit of cos/sin.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/core/thread_pool.h"

namespace loom::cpu {

// The fields of a config's `rope_scaling` / `rope_parameters` (+ rope_theta, partial_rotary_factor
// and max_position_embeddings) that the supported rope types read.
struct RopeParams {
  std::string type = "default";  // "default", "linear", "dynamic", "llama3", "yarn", "longrope"
  double theta = 10000.0;        // rope_theta
  double factor = 0;             // 0 = not given (yarn then uses max / original max positions)
  double low_freq_factor = 1, high_freq_factor = 4;  // llama3
  int64_t original_max_position_embeddings = 0;      // 0 = not given
  int64_t max_position_embeddings = 0;
  double beta_fast = 32, beta_slow = 1;  // yarn; 0 = not given (32 / 1, like Transformers' `or`)
  std::optional<double> mscale, mscale_all_dim, attention_factor;  // yarn
  bool truncate = true;                                            // yarn: floor/ceil the correction range
  double partial_rotary_factor = 1;
  // longrope: per-frequency divisors, rotary_dim / 2 each; the long ones once a
  // sequence is longer than original_max_position_embeddings.
  std::vector<double> long_factor, short_factor;
};

// inv_freq gets rotary_dim / 2 values, rotary_dim = int(head_dim * partial_rotary_factor);
// attention_scaling multiplies cos and sin (1 except for yarn). seq_len matters only for
// "dynamic" (the current sequence length; <= 0 means max_position_embeddings) and
// "longrope" (long factors when seq_len > original_max_position_embeddings). Follows
// Transformers' _compute_{default,linear_scaling,dynamic_ntk,llama3,yarn}_rope_parameters,
// including their f32 tensor arithmetic. Errors name the missing or bad field.
Status compute_inv_freq(const RopeParams& params, int64_t head_dim, int64_t seq_len, std::vector<float>* inv_freq,
                        float* attention_scaling);

// Rotates x in place: x is [rows (tokens), num_heads, head_dim] with row_stride elements per
// token; for each head and i < rotary_dim/2 the pair (x[i], x[i + rotary_dim/2]) is rotated by
// positions[row] * inv_freq[i]. Dims >= rotary_dim are untouched (partial rotary).
// Bad sizes throw loom::Error.
void rope_apply(float* x, int64_t rows, int64_t num_heads, int64_t head_dim, int64_t row_stride,
                const int32_t* positions, const float* inv_freq, int64_t rotary_dim, float attention_scaling,
                ThreadPool& pool);

// The two halves of rope_apply, so that a forward step computes the angles once and rotates the
// q and k of every layer with them. cos_sin is [rows, rotary_dim]: cos (× attention_scaling) in
// the first rotary_dim/2 entries of a row, sin (× attention_scaling) in the second.
void rope_cos_sin(const int32_t* positions, int64_t rows, const float* inv_freq, int64_t rotary_dim,
                  float attention_scaling, float* cos_sin);
void rope_apply_cos_sin(float* x, int64_t rows, int64_t num_heads, int64_t head_dim, int64_t row_stride,
                        const float* cos_sin, int64_t rotary_dim, ThreadPool& pool);

// Scalar reference: Hugging Face's apply_rotary_pos_emb transcribed element by element in f32.
void rope_apply_ref(float* x, int64_t rows, int64_t num_heads, int64_t head_dim, int64_t row_stride,
                    const int32_t* positions, const float* inv_freq, int64_t rotary_dim, float attention_scaling);

}  // namespace loom::cpu
