// Gemma2 (modeling_gemma2.py) on the shared decoder: token embeddings times
// sqrt(hidden_size), RMSNorms scaling by (1 + weight), four norms a layer
// (post_attention_layernorm on the attention output before the residual add,
// pre_/post_feedforward_layernorm around the MLP), a GeGLU MLP
// (hidden_activation), attention scaled by query_pre_attn_scalar^-0.5 with its
// logits soft-capped before the mask, the final logits soft-capped, sliding
// and global layers alternating, tied embeddings. The checkpoint's names are
// loom's module paths, so there are no weight rules.
#include "models/gemma2.h"
#include "models/config_json.h"
#include "models/decoder_config.h"

#include <cmath>

namespace loom::models {
namespace {


// Gemma2Config's defaults (configuration_gemma2.py) for what config.json
// omits, written in before ModelConfig's generic parse (which would otherwise
// apply its own: no window, all layers full, head_dim = hidden / heads, …).
Status adapt_gemma2_json(nlohmann::json& j) {
  auto fill = [&j](const char* key, nlohmann::json value) {
    if (!j.contains(key)) j[key] = std::move(value);
  };
  fill("vocab_size", 256000);
  fill("hidden_size", 2304);
  fill("intermediate_size", 9216);
  fill("num_hidden_layers", 26);
  fill("num_attention_heads", 8);
  fill("num_key_value_heads", 4);
  fill("head_dim", 256);
  fill("max_position_embeddings", 8192);
  fill("rms_norm_eps", 1e-6);
  fill("pad_token_id", 0);
  fill("eos_token_id", 1);
  fill("bos_token_id", 2);
  fill("tie_word_embeddings", true);
  fill("rope_theta", 10000.0);
  fill("sliding_window", 4096);  // an explicit null stays null: no window
  // Gemma2MLP reads hidden_activation; a hidden_act in the file is ignored, as
  // upstream. ModelConfig::hidden_act carries it from here on.
  if (absent(j, "hidden_activation")) j["hidden_act"] = "gelu_pytorch_tanh";
  else if (!j.at("hidden_activation").is_string()) return parse_error("config.json: hidden_activation must be a string");
  else j["hidden_act"] = j.at("hidden_activation");
  // Gemma2Config.__post_init__: a missing or null layer_types slides the even layers.
  if (absent(j, "layer_types")) {
    if (!j.at("num_hidden_layers").is_number_integer())
      return parse_error("config.json: num_hidden_layers must be an integer");
    const int64_t n = j.at("num_hidden_layers").get<int64_t>();
    nlohmann::json types = nlohmann::json::array();
    for (int64_t i = 0; i < n; ++i) types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    j["layer_types"] = std::move(types);
  }
  return Status::Ok();
}

// A Gemma2-specific number from config.json: absent → fallback, null → nullopt.
Result<std::optional<double>> optional_number(const ModelConfig& c, const char* key, double fallback) {
  if (!c.raw.contains(key)) return std::optional<double>(fallback);
  const nlohmann::json& v = c.raw.at(key);
  if (v.is_null()) return std::optional<double>();
  if (!v.is_number()) return parse_error(c.source + ": " + key + " must be a number or null");
  return std::optional<double>(v.get<double>());
}

Result<std::unique_ptr<CausalLM>> build_gemma2(const ModelConfig& c) {
  const nlohmann::json& raw = c.raw;
  const std::string& act = c.hidden_act;  // hidden_activation (adapt_gemma2_json)
  if (act != "gelu_pytorch_tanh" && act != "gelu_new" && act != "gelu" && act != "silu")
    return unsupported(c.source + ": hidden_activation '" + act +
                       "' is not supported for Gemma2 (gelu_pytorch_tanh, gelu_new, gelu, silu)");
  if (!absent(raw, "use_bidirectional_attention") && raw.at("use_bidirectional_attention").is_boolean() &&
      raw.at("use_bidirectional_attention").get<bool>())
    return unsupported(c.source + ": use_bidirectional_attention true is not supported (loom's attention is causal)");
  LOOM_ASSIGN_OR_RETURN(std::optional<double> scalar, optional_number(c, "query_pre_attn_scalar", 256.0));
  if (!scalar || !(*scalar > 0)) return invalid_argument(c.source + ": query_pre_attn_scalar must be a positive number");
  LOOM_ASSIGN_OR_RETURN(std::optional<double> attn_cap, optional_number(c, "attn_logit_softcapping", 50.0));
  LOOM_ASSIGN_OR_RETURN(std::optional<double> final_cap, optional_number(c, "final_logit_softcapping", 30.0));
  for (const auto& [key, cap] : {std::pair{"attn_logit_softcapping", attn_cap}, std::pair{"final_logit_softcapping", final_cap}})
    if (cap && !(*cap > 0 && std::isfinite(*cap)))
      return invalid_argument(c.source + ": " + key + " must be positive (or null for none)");

  DecoderSettings s;
  s.class_prefix = "Gemma2";
  s.vocab_size = c.vocab_size;
  s.hidden_size = c.hidden_size;
  s.intermediate_size = c.intermediate_size;
  s.norm_eps = c.rms_norm_eps;
  s.hidden_act = act == "gelu_new" ? "gelu_pytorch_tanh" : act;
  s.tie_word_embeddings = c.tie_word_embeddings;
  s.norm_weight_offset = 1.0;
  // torch.tensor(hidden_size**0.5, dtype=hidden_states.dtype): loom's hidden dtype is f32.
  s.embedding_scale = static_cast<double>(static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size))));
  s.sandwich_norms = true;
  s.final_logit_softcap = final_cap.value_or(0.0);

  RopeSettings rope;
  rope.theta = c.rope_theta;
  rope.max_position_embeddings = c.max_position_embeddings;
  rope.original_max_position_embeddings = c.max_position_embeddings;
  if (c.rope_scaling.rope_type != "default")
    return unsupported(c.source + ": rope scaling '" + c.rope_scaling.rope_type + "' is not supported for Gemma2");
  rope.rotary_dim = c.head_dim;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string& type = c.layer_types.at(static_cast<size_t>(i));
    if (type != "sliding_attention" && type != "full_attention")
      return invalid_argument(c.source + ": layer_types entry " + std::to_string(i) + " is '" + type +
                              "' (expected full_attention or sliding_attention)");
    AttentionSettings a = attention_from_config(c, i);
    a.scale = 1.0 / std::sqrt(*scalar);
    a.softcap = attn_cap.value_or(0.0);
    LOOM_RETURN_IF_ERROR(apply_layer_window(a, c, i));
    a.rope = rope;
    s.layers.push_back(a);
  }
  return std::make_unique<CausalLM>(s);
}

bool gemma2_expected_unused(const std::string& name, const ModelConfig& c) {
  return c.tie_word_embeddings && name == "lm_head.weight";
}

}  // namespace

Architecture gemma2_architecture() {
  return Architecture{.model_type = "gemma2",
                      .class_name = "Gemma2ForCausalLM",
                      .adapt_config_json = adapt_gemma2_json,
                      .resolve_config = {},
                      .build = build_gemma2,
                      .weight_rules = [](const ModelConfig&) { return WeightRules{}; },
                      .expected_unused = gemma2_expected_unused};
}

}  // namespace loom::models
