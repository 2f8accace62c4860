// Gemma3 (modeling_gemma3.py) on the shared decoder. Gemma2's layer — token
// embeddings times sqrt(hidden_size), (1 + weight) RMSNorms on both sides of
// attention and MLP, GeGLU (hidden_activation), attention scaled by
// query_pre_attn_scalar^-0.5, tied embeddings — plus:
// - q_norm / k_norm: a (1 + weight) RMSNorm over each head of q and k, before RoPE;
// - two RoPEs: sliding layers rotate with rope_local_base_freq (10k, never
//   scaled), full layers with rope_theta (1M) and rope_scaling (linear ×8 on 4B+);
// - layer_types, or the 4.x sliding_window_pattern (6: every sixth layer full);
// - no soft-caps by default. Gemma3Attention never passes attn_logit_softcapping
//   to the attention function, so it is not applied; final_logit_softcapping is
//   applied by Gemma3ForCausalLM and not by Gemma3ForConditionalGeneration.
//
// Gemma3ForConditionalGeneration (model_type gemma3) is its text model: the
// config under text_config, the weights under language_model.model.* (saved by
// Transformers 4.50) or model.language_model.* (_checkpoint_conversion_mapping's
// targets). The vision tower and projector are skipped, said once at load.
#include "models/gemma3.h"

#include <cmath>

#include "loom/core/logging.h"
#include "models/config_json.h"
#include "models/rope_config.h"
#include "models/decoder_config.h"

namespace loom::models {
namespace {

// Gemma3TextConfig's defaults (configuration_gemma3.py) for what config.json
// omits, written in before ModelConfig's generic parse; Transformers 5.x's
// per-layer-type rope_parameters become the global RoPE (rope_parameters) and
// rope_local_base_freq, as 4.x configs spell them.
Status adapt_gemma3_text_json(nlohmann::json& j) {
  auto fill = [&j](const char* key, nlohmann::json value) {
    if (!j.contains(key)) j[key] = std::move(value);
  };
  fill("vocab_size", 262208);
  fill("hidden_size", 2304);
  fill("intermediate_size", 9216);
  fill("num_hidden_layers", 26);
  fill("num_attention_heads", 8);
  fill("num_key_value_heads", 4);
  fill("head_dim", 256);
  fill("max_position_embeddings", 131072);
  fill("rms_norm_eps", 1e-6);
  fill("pad_token_id", 0);
  fill("eos_token_id", 1);
  fill("bos_token_id", 2);
  fill("tie_word_embeddings", true);
  fill("sliding_window", 4096);  // an explicit null stays null: no window
  if (absent(j, "hidden_activation")) j["hidden_act"] = "gelu_pytorch_tanh";
  else if (!j.at("hidden_activation").is_string()) return parse_error("config.json: hidden_activation must be a string");
  else j["hidden_act"] = j.at("hidden_activation");

  if (!absent(j, "rope_parameters") && j.at("rope_parameters").is_object() && !j.at("rope_parameters").empty()) {
    const nlohmann::json rp = j.at("rope_parameters");
    bool per_type = true;
    for (const auto& [k, v] : rp.items()) per_type = per_type && v.is_object();
    if (per_type) {
      for (const auto& [k, v] : rp.items())
        if (k != "full_attention" && k != "sliding_attention")
          return parse_error("config.json: rope_parameters has an entry for '" + k +
                             "' (Gemma3 has full_attention and sliding_attention layers)");
      nlohmann::json full = rp.contains("full_attention") ? rp.at("full_attention") : nlohmann::json::object();
      if (!full.contains("rope_theta")) full["rope_theta"] = 1000000.0;
      j["rope_parameters"] = full;
      double local = 10000.0;
      if (rp.contains("sliding_attention")) {
        const nlohmann::json& s = rp.at("sliding_attention");
        const std::string type = s.contains("rope_type") && s.at("rope_type").is_string() ? s.at("rope_type").get<std::string>()
                                 : s.contains("type") && s.at("type").is_string()      ? s.at("type").get<std::string>()
                                                                                          : "default";
        if (type != "default")
          return unsupported("config.json: rope_parameters.sliding_attention.rope_type '" + type +
                             "' (Gemma3's sliding layers use default RoPE)");
        if (s.contains("rope_theta")) {
          if (!s.at("rope_theta").is_number())
            return parse_error("config.json: rope_parameters.sliding_attention.rope_theta must be a number");
          local = s.at("rope_theta").get<double>();
        }
      }
      j["rope_local_base_freq"] = local;
    }
  }
  fill("rope_theta", 1000000.0);
  if (absent(j, "rope_local_base_freq")) j["rope_local_base_freq"] = 10000.0;
  else if (!j.at("rope_local_base_freq").is_number() || !(j.at("rope_local_base_freq").get<double>() > 0))
    return parse_error("config.json: rope_local_base_freq must be a positive number");

  // Gemma3TextConfig: a missing or null layer_types slides layer i unless
  // (i + 1) is a multiple of sliding_window_pattern (default 6).
  if (absent(j, "layer_types")) {
    if (!j.at("num_hidden_layers").is_number_integer())
      return parse_error("config.json: num_hidden_layers must be an integer");
    int64_t pattern = 6;
    if (!absent(j, "sliding_window_pattern")) {
      if (!j.at("sliding_window_pattern").is_number_integer() || j.at("sliding_window_pattern").get<int64_t>() <= 0)
        return parse_error("config.json: sliding_window_pattern must be a positive integer");
      pattern = j.at("sliding_window_pattern").get<int64_t>();
    }
    const int64_t n = j.at("num_hidden_layers").get<int64_t>();
    if (n < 0 || n > (1 << 16)) return parse_error("config.json: num_hidden_layers out of range");
    nlohmann::json types = nlohmann::json::array();
    for (int64_t i = 0; i < n; ++i) types.push_back((i + 1) % pattern != 0 ? "sliding_attention" : "full_attention");
    j["layer_types"] = std::move(types);
  }
  return Status::Ok();
}

// Gemma3Config: the language model's config is text_config (a missing one is
// Gemma3TextConfig's defaults). The flattened config keeps model_type gemma3,
// so the weight rules for the multimodal layout apply; token ids and the dtype
// the file gives only at the top level are carried over.
Status adapt_gemma3_json(nlohmann::json& j) {
  nlohmann::json text = nlohmann::json::object();
  if (!absent(j, "text_config")) {
    if (!j.at("text_config").is_object()) return parse_error("config.json: text_config must be an object");
    text = j.at("text_config");
  }
  for (const char* key : {"architectures", "torch_dtype", "bos_token_id", "eos_token_id", "pad_token_id"})
    if (j.contains(key) && !text.contains(key)) text[key] = j.at(key);
  text["model_type"] = "gemma3";
  text["loom_has_vision_config"] = j.contains("vision_config");
  j = std::move(text);
  return adapt_gemma3_text_json(j);
}

// A Gemma3-specific number from config.json: absent → fallback, null → nullopt.
Result<std::optional<double>> optional_number(const ModelConfig& c, const char* key, std::optional<double> fallback) {
  if (!c.raw.contains(key)) return fallback;
  const nlohmann::json& v = c.raw.at(key);
  if (v.is_null()) return std::optional<double>();
  if (!v.is_number()) return parse_error(c.source + ": " + key + " must be a number or null");
  return std::optional<double>(v.get<double>());
}

Result<std::unique_ptr<CausalLM>> build_gemma3(const ModelConfig& c, bool conditional_generation) {
  const nlohmann::json& raw = c.raw;
  const std::string& act = c.hidden_act;  // hidden_activation (adapt_gemma3_text_json)
  if (act != "gelu_pytorch_tanh" && act != "gelu_new" && act != "gelu" && act != "silu")
    return unsupported(c.source + ": hidden_activation '" + act +
                       "' is not supported for Gemma3 (gelu_pytorch_tanh, gelu_new, gelu, silu)");
  if (!absent(raw, "use_bidirectional_attention") && raw.at("use_bidirectional_attention").is_boolean() &&
      raw.at("use_bidirectional_attention").get<bool>())
    return unsupported(c.source + ": use_bidirectional_attention true is not supported (loom's attention is causal)");
  LOOM_ASSIGN_OR_RETURN(std::optional<double> scalar, optional_number(c, "query_pre_attn_scalar", 256.0));
  if (!scalar || !(*scalar > 0)) return invalid_argument(c.source + ": query_pre_attn_scalar must be a positive number");
  LOOM_ASSIGN_OR_RETURN(std::optional<double> final_cap, optional_number(c, "final_logit_softcapping", std::nullopt));
  if (final_cap && !(*final_cap > 0 && std::isfinite(*final_cap)))
    return invalid_argument(c.source + ": final_logit_softcapping must be positive (or null for none)");
  LOOM_ASSIGN_OR_RETURN(std::optional<double> attn_cap, optional_number(c, "attn_logit_softcapping", std::nullopt));
  if (attn_cap)
    log_warn(c.source + ": attn_logit_softcapping is not applied, as in Transformers' Gemma3 attention");
  if (conditional_generation) {
    if (final_cap)
      log_warn(c.source + ": final_logit_softcapping is not applied, as in Transformers' Gemma3ForConditionalGeneration");
    final_cap.reset();
    if (raw.value("loom_has_vision_config", false))
      log_warn(c.source + ": Gemma3ForConditionalGeneration: running its language model; the vision tower and "
                          "multimodal projector are skipped (loom takes text only)");
  }
  const double local_base = raw.at("rope_local_base_freq").get<double>();

  DecoderSettings s;
  s.class_prefix = "Gemma3";
  s.class_name = conditional_generation ? "Gemma3ForConditionalGeneration" : "";
  s.vocab_size = c.vocab_size;
  s.hidden_size = c.hidden_size;
  s.intermediate_size = c.intermediate_size;
  s.norm_eps = c.rms_norm_eps;
  s.hidden_act = act == "gelu_new" ? "gelu_pytorch_tanh" : act;
  s.tie_word_embeddings = c.tie_word_embeddings;
  s.norm_weight_offset = 1.0;
  // Gemma3TextScaledWordEmbedding: sqrt(hidden_size) cast to the weight dtype; loom's
  // embeddings enter the hidden stream as f32 (llama.cpp scales by sqrtf(n_embd) too).
  s.embedding_scale = static_cast<double>(static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size))));
  s.sandwich_norms = true;
  s.final_logit_softcap = final_cap.value_or(0.0);

  const RopeSettings global = rope_from_config(c);
  if (global.rotary_dim != c.head_dim)
    return unsupported(c.source + ": partial_rotary_factor is not supported for Gemma3");
  RopeSettings local;  // Gemma3TextModel.rotary_emb_local: rope_type default, the local base
  local.theta = local_base;
  local.max_position_embeddings = c.max_position_embeddings;
  local.original_max_position_embeddings = c.max_position_embeddings;
  local.rotary_dim = c.head_dim;
  if (c.layer_types.size() != static_cast<size_t>(c.num_hidden_layers))
    return invalid_argument(c.source + ": layer_types has " + std::to_string(c.layer_types.size()) +
                            " entries but num_hidden_layers is " + std::to_string(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string& type = c.layer_types.at(static_cast<size_t>(i));
    if (type != "sliding_attention" && type != "full_attention")
      return invalid_argument(c.source + ": layer_types entry " + std::to_string(i) + " is '" + type +
                              "' (expected full_attention or sliding_attention)");
    AttentionSettings a = attention_from_config(c, i);
    a.qk_norm = true;
    a.qk_norm_weight_offset = 1.0;
    a.scale = 1.0 / std::sqrt(*scalar);
    LOOM_RETURN_IF_ERROR(apply_layer_window(a, c, i));
    if (type == "sliding_attention") {
      a.rope = local;
    } else {
      a.rope = global;
    }
    s.layers.push_back(a);
  }
  return std::make_unique<CausalLM>(s);
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The multimodal checkpoint's language model lands on loom's module paths.
WeightRules gemma3_mm_rules(const ModelConfig&) {
  auto rename = [](const char* from, const char* to) {
    WeightRenaming r;
    r.source = from;
    r.target = to;
    r.optional = true;  // a file uses one of the two layouts
    r.name = std::string("Gemma3ForConditionalGeneration ") + from;
    return WeightRule{r};
  };
  return {rename("^language_model.model", "model"), rename("^model.language_model", "model"),
          rename("^language_model.lm_head", "lm_head")};
}

bool gemma3_mm_expected_unused(const std::string& name, const ModelConfig& c) {
  for (const char* skipped : {"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."})
    if (starts_with(name, skipped)) return true;
  return c.tie_word_embeddings && (name == "lm_head.weight" || name == "language_model.lm_head.weight");
}

}  // namespace

Architecture gemma3_text_architecture() {
  return Architecture{.model_type = "gemma3_text",
                      .class_name = "Gemma3ForCausalLM",
                      .adapt_config_json = adapt_gemma3_text_json,
                      .resolve_config = {},
                      .build = [](const ModelConfig& c) { return build_gemma3(c, false); },
                      .weight_rules = [](const ModelConfig&) { return WeightRules{}; },
                      .expected_unused = tied_lm_head_unused};
}

Architecture gemma3_architecture() {
  return Architecture{.model_type = "gemma3",
                      .class_name = "Gemma3ForConditionalGeneration",
                      .adapt_config_json = adapt_gemma3_json,
                      .resolve_config = {},
                      .build = [](const ModelConfig& c) { return build_gemma3(c, true); },
                      .weight_rules = gemma3_mm_rules,
                      .expected_unused = gemma3_mm_expected_unused};
}

}  // namespace loom::models
