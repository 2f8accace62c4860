// What every decoder family reads from its config the same way: the attention layer's
// shape, biases and eps, and a tied checkpoint's unused lm_head. Each family then sets
// what differs (norms, scales, windows, RoPE).
#pragma once

#include <cstdint>
#include <string>

#include "loom/core/status.h"
#include "loom/io/model_config.h"
#include "loom/models/layers.h"

namespace loom::models {

// config.json's attention_bias covers q, k, v and o alike (Llama-style families).
inline AttentionSettings attention_from_config(const ModelConfig& c, int64_t layer) {
  AttentionSettings a;
  a.layer = static_cast<int>(layer);
  a.hidden = c.hidden_size;
  a.num_heads = c.num_attention_heads;
  a.num_kv_heads = c.num_key_value_heads;
  a.head_dim = c.head_dim;
  a.qkv_bias = a.o_bias = c.attention_bias;
  a.norm_eps = c.rms_norm_eps;
  return a;
}

// A layer whose layer_types entry is sliding_attention attends over config's window;
// a sliding layer without a (positive) window is refused, as Transformers' mask does.
inline Status apply_layer_window(AttentionSettings& a, const ModelConfig& c, int64_t layer) {
  const size_t i = static_cast<size_t>(layer);
  if (i >= c.layer_types.size() || c.layer_types[i] != "sliding_attention") return Status::Ok();
  if (!c.sliding_window || *c.sliding_window <= 0)
    return invalid_argument(c.source + ": layer " + std::to_string(layer) +
                            " uses sliding attention but sliding_window is null (or not positive; with "
                            "use_sliding_window false it is null)");
  a.sliding_window = *c.sliding_window;
  return Status::Ok();
}

// A checkpoint with tied embeddings may still hold lm_head.weight: it is not read.
inline bool tied_lm_head_unused(const std::string& name, const ModelConfig& c) {
  return c.tie_word_embeddings && name == "lm_head.weight";
}

}  // namespace loom::models
