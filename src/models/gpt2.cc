// GPT-2 (modeling_gpt2.py) on the shared decoder: LayerNorm with bias, learned
// position embeddings added to the token embeddings, no RoPE, biased q/k/v/o
// and an ungated MLP with gelu_new (the tanh approximation), tied LM head.
//
// The checkpoint keeps GPT-2's own layout: Conv1D weights stored [in, out]
// (transposed from nn.Linear's [out, in]) and q/k/v fused into c_attn. The
// weight rules rename transformer.h.N.* to loom's module paths, transpose the
// Conv1D weights and chunk c_attn into q/k/v; saving runs them backwards.
#include "models/gpt2.h"
#include "models/config_json.h"

#include <cmath>

namespace loom::models {
namespace {


// GPT2Config's field names and defaults → ModelConfig's.
Status adapt_gpt2_json(nlohmann::json& j) {
  auto move = [&j](const char* from, const char* to, nlohmann::json fallback) {
    if (!absent(j, to)) return;
    j[to] = absent(j, from) ? std::move(fallback) : j.at(from);
  };
  move("n_embd", "hidden_size", 768);
  move("n_layer", "num_hidden_layers", 12);
  move("n_head", "num_attention_heads", 12);
  move("n_positions", "max_position_embeddings", 1024);
  move("activation_function", "hidden_act", "gelu_new");
  if (absent(j, "vocab_size")) j["vocab_size"] = 50257;
  if (!j.at("hidden_size").is_number_integer())
    return parse_error("config.json: n_embd must be an integer");
  move("n_inner", "intermediate_size", 4 * j.at("hidden_size").get<int64_t>());
  if (absent(j, "bos_token_id")) j["bos_token_id"] = 50256;
  if (absent(j, "eos_token_id")) j["eos_token_id"] = 50256;
  for (const char* unsupported_flag : {"scale_attn_by_inverse_layer_idx", "add_cross_attention"})
    if (!absent(j, unsupported_flag) && j.at(unsupported_flag).is_boolean() && j.at(unsupported_flag).get<bool>())
      return unsupported(std::string("config.json: ") + unsupported_flag + " true is not supported for GPT2LMHeadModel");
  return Status::Ok();
}

Result<std::unique_ptr<CausalLM>> build_gpt2(const ModelConfig& c) {
  std::string act = c.hidden_act;
  if (act == "gelu_new" || act == "gelu_fast" || act == "gelu_pytorch_tanh") act = "gelu_pytorch_tanh";
  else if (act != "gelu")
    return unsupported("config.json: activation_function '" + c.hidden_act +
                       "' is not supported for GPT-2 (gelu_new, gelu_fast, gelu_pytorch_tanh, gelu)");
  const nlohmann::json& raw = c.raw;
  double eps = 1e-5;
  if (!absent(raw, "layer_norm_epsilon")) {
    if (!raw.at("layer_norm_epsilon").is_number()) return parse_error("config.json: layer_norm_epsilon must be a number");
    eps = raw.at("layer_norm_epsilon").get<double>();
  }
  const bool scale_weights = absent(raw, "scale_attn_weights") || !raw.at("scale_attn_weights").is_boolean() ||
                             raw.at("scale_attn_weights").get<bool>();
  if (c.num_key_value_heads != c.num_attention_heads)
    return invalid_argument("config.json: GPT-2 has no grouped-query attention (num_key_value_heads must equal n_head)");
  DecoderSettings s;
  s.class_prefix = "GPT2";
  s.class_name = "GPT2LMHeadModel";
  s.vocab_size = c.vocab_size;
  s.hidden_size = c.hidden_size;
  s.intermediate_size = c.intermediate_size;
  s.norm_eps = eps;
  s.hidden_act = act;
  s.mlp_bias = true;
  s.tie_word_embeddings = c.tie_word_embeddings;
  s.layer_norm = true;
  s.gated_mlp = false;
  s.learned_positions = c.max_position_embeddings;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    AttentionSettings a;
    a.layer = static_cast<int>(i);
    a.hidden = c.hidden_size;
    a.num_heads = c.num_attention_heads;
    a.num_kv_heads = c.num_attention_heads;
    a.head_dim = c.head_dim;
    a.qkv_bias = true;
    a.o_bias = true;
    a.norm_eps = eps;
    a.use_rope = false;
    a.scale = scale_weights ? 0.0 : 1.0;
    s.layers.push_back(a);
  }
  return std::make_unique<CausalLM>(s);
}

WeightRules gpt2_rules(const ModelConfig&) {
  auto rename = [](std::string from, std::string to, bool optional) {
    WeightRenaming r;
    r.source = std::move(from);
    r.target = std::move(to);
    r.optional = optional;
    return WeightRule{r};
  };
  auto transpose = [](const char* name) {
    return WeightRule{WeightConverter{{name}, {name}, {Transpose(0, 1)}, false, std::string("Conv1D ") + name}};
  };
  return {
      // Saved by GPT2LMHeadModel under transformer.*; the original OpenAI
      // conversion has no prefix. Both land on the same paths (a file uses one).
      rename("^transformer.h.*", "model.layers.*", true),
      rename("^h.*", "model.layers.*", true),
      rename("^transformer.wte", "model.embed_tokens", true),
      rename("^wte", "model.embed_tokens", true),
      rename("^transformer.wpe", "model.embed_positions", true),
      rename("^wpe", "model.embed_positions", true),
      rename("^transformer.ln_f", "model.norm", true),
      rename("^ln_f", "model.norm", true),
      rename("ln_1", "input_layernorm", false),
      rename("ln_2", "post_attention_layernorm", false),
      rename("attn.c_proj", "self_attn.o_proj", false),
      rename("mlp.c_fc", "mlp.up_proj", false),
      rename("mlp.c_proj", "mlp.down_proj", false),
      WeightConverter{{"attn.c_attn.weight"},
                      {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"},
                      {Transpose(0, 1), Chunk(0)},
                      false,
                      "GPT-2 c_attn (Conv1D, fused q|k|v)"},
      WeightConverter{{"attn.c_attn.bias"},
                      {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"},
                      {Chunk(0)},
                      false,
                      "GPT-2 c_attn bias"},
      transpose("self_attn.o_proj.weight"),
      transpose("mlp.up_proj.weight"),
      transpose("mlp.down_proj.weight"),
  };
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Older checkpoints carry the causal-mask buffers attn.bias / attn.masked_bias.
bool gpt2_expected_unused(const std::string& name, const ModelConfig& c) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
         (c.tie_word_embeddings && name == "lm_head.weight");
}

}  // namespace

Architecture gpt2_architecture() {
  return Architecture{.model_type = "gpt2",
                      .class_name = "GPT2LMHeadModel",
                      .adapt_config_json = adapt_gpt2_json,
                      .build = build_gpt2,
                      .weight_rules = gpt2_rules,
                      .expected_unused = gpt2_expected_unused};
}

}  // namespace loom::models
