// Mixtral (modeling_mixtral.py), Qwen2-MoE (modeling_qwen2_moe.py) and
// Qwen3-MoE (modeling_qwen3_moe.py): the Mistral, Qwen2 and Qwen3 decoders
// whose MLPs are sparse MoE blocks (models/moe.h).
//
// The decoder itself is built by the Mistral / Qwen2 / Qwen3 entries of the
// registry (attention, biases, q/k norms and windows exactly as theirs); this
// file swaps in the MoE settings per layer and the class names, so there is no
// second copy of the dense decoder's construction.
//
// Checkpoints store one tensor per expert (Mixtral: block_sparse_moe.experts.M.w1
// / w3 / w2; Qwen2-MoE, Qwen3-MoE: mlp.experts.M.gate_proj / up_proj / down_proj). The
// weight rules stack them as Transformers 5.x's conversion mapping does
// (MergeModulelist, then Concatenate of gate and up), and save_pretrained
// splits them back.
#include "models/moe_architectures.h"
#include "models/config_json.h"
#include "models/decoder_config.h"

#include <algorithm>
#include <string>
#include <vector>

namespace loom::models {
namespace {

using nlohmann::json;


Result<int64_t> int_or(const ModelConfig& c, const char* key, int64_t fallback) {
  if (absent(c.raw, key)) return fallback;
  const json& v = c.raw.at(key);
  if (!v.is_number_integer()) return parse_error(c.source + ": field '" + key + "' must be an integer");
  return v.get<int64_t>();
}

Result<bool> bool_or(const ModelConfig& c, const char* key, bool fallback) {
  if (absent(c.raw, key)) return fallback;
  const json& v = c.raw.at(key);
  if (!v.is_boolean()) return parse_error(c.source + ": field '" + key + "' must be a boolean");
  return v.get<bool>();
}

enum class MoeFamily { kMixtral, kQwen2Moe, kQwen3Moe };

// What the families read beyond ModelConfig, with their config classes' defaults.
struct MoeConfig {
  int64_t num_experts = 0, top_k = 0, moe_intermediate = 0, shared_intermediate = 0;
  bool norm_topk_prob = true;
  bool qkv_bias = true;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
};

Result<MoeConfig> read_moe_config(const ModelConfig& c, MoeFamily family) {
  MoeConfig m;
  if (family != MoeFamily::kMixtral) {  // Qwen2MoeConfig, Qwen3MoeConfig
    const bool qwen3 = family == MoeFamily::kQwen3Moe;
    LOOM_ASSIGN_OR_RETURN(m.num_experts, int_or(c, "num_experts", qwen3 ? 128 : 60));
    LOOM_ASSIGN_OR_RETURN(m.top_k, int_or(c, "num_experts_per_tok", qwen3 ? 8 : 4));
    LOOM_ASSIGN_OR_RETURN(m.moe_intermediate, int_or(c, "moe_intermediate_size", qwen3 ? 768 : 1408));
    // Qwen3-MoE has no shared expert; its attention biases follow attention_bias (the Qwen3 decoder's).
    if (!qwen3) {
      LOOM_ASSIGN_OR_RETURN(m.shared_intermediate, int_or(c, "shared_expert_intermediate_size", 5632));
      LOOM_ASSIGN_OR_RETURN(m.qkv_bias, bool_or(c, "qkv_bias", true));
    }
    LOOM_ASSIGN_OR_RETURN(m.norm_topk_prob, bool_or(c, "norm_topk_prob", false));
    LOOM_ASSIGN_OR_RETURN(m.decoder_sparse_step, int_or(c, "decoder_sparse_step", 1));
    if (!absent(c.raw, "mlp_only_layers")) {
      const json& v = c.raw.at("mlp_only_layers");
      if (!v.is_array()) return parse_error(c.source + ": field 'mlp_only_layers' must be a list of layer indices");
      for (const json& i : v) {
        if (!i.is_number_integer()) return parse_error(c.source + ": field 'mlp_only_layers' must hold integers");
        m.mlp_only_layers.push_back(i.get<int64_t>());
      }
    }
    if (m.decoder_sparse_step <= 0) return invalid_argument(c.source + ": decoder_sparse_step must be positive");
    if (m.num_experts > 0 && m.moe_intermediate <= 0)
      return invalid_argument(c.source + ": moe_intermediate_size must be positive");
    if (m.shared_intermediate < 0) return invalid_argument(c.source + ": shared_expert_intermediate_size must not be negative");
  } else {  // MixtralConfig
    LOOM_ASSIGN_OR_RETURN(m.num_experts, int_or(c, "num_local_experts", 8));
    LOOM_ASSIGN_OR_RETURN(m.top_k, int_or(c, "num_experts_per_tok", 2));
    m.moe_intermediate = c.intermediate_size;
    m.norm_topk_prob = true;  // MixtralSparseMoeBlock always renormalises
    m.qkv_bias = false;
    if (m.num_experts <= 0) return invalid_argument(c.source + ": num_local_experts must be positive");
  }
  if (m.num_experts < 0) return invalid_argument(c.source + ": the number of experts must not be negative");
  if (m.num_experts > 0 && (m.top_k < 1 || m.top_k > m.num_experts))
    return invalid_argument(c.source + ": num_experts_per_tok (" + std::to_string(m.top_k) + ") must be in [1, " +
                            std::to_string(m.num_experts) + "]");
  return m;
}

// Fills in what the config class defaults when config.json omits it, where
// ModelConfig's generic parse (unknown model_type) defaults differently.
struct ConfigDefaults {
  int64_t intermediate_size, num_key_value_heads, max_position_embeddings;
  double rms_norm_eps, rope_theta;
  std::optional<int64_t> bos;
  std::vector<int64_t> eos;
};

Status apply_defaults(ModelConfig& c, const ConfigDefaults& d) {
  const json& raw = c.raw;
  if (absent(raw, "tie_word_embeddings")) c.tie_word_embeddings = false;
  if (absent(raw, "intermediate_size")) c.intermediate_size = d.intermediate_size;
  if (absent(raw, "max_position_embeddings")) c.max_position_embeddings = d.max_position_embeddings;
  if (absent(raw, "rms_norm_eps")) c.rms_norm_eps = d.rms_norm_eps;
  const bool theta_in_params = raw.contains("rope_parameters") && raw.at("rope_parameters").is_object() &&
                               raw.at("rope_parameters").contains("rope_theta");
  if (absent(raw, "rope_theta") && !theta_in_params) c.rope_theta = d.rope_theta;
  if (!raw.contains("bos_token_id")) c.bos_token_id = d.bos;
  if (!raw.contains("eos_token_id")) c.eos_token_ids = d.eos;
  if (!raw.contains("num_key_value_heads")) {
    c.num_key_value_heads = d.num_key_value_heads;
    if (c.num_attention_heads % c.num_key_value_heads != 0)
      return invalid_argument(c.source + ": num_attention_heads (" + std::to_string(c.num_attention_heads) +
                              ") must be a multiple of the default num_key_value_heads (" +
                              std::to_string(c.num_key_value_heads) + ")");
  }
  return Status::Ok();
}

Status resolve_mixtral_config(ModelConfig& c) {
  LOOM_RETURN_IF_ERROR(apply_defaults(c, {14336, 8, 4096 * 32, 1e-5, 1e6, 1, {2}}));
  // MixtralAttention passes sliding_window to every layer (None by default).
  if (!c.raw.contains("layer_types"))
    c.layer_types.assign(static_cast<size_t>(c.num_hidden_layers), c.sliding_window ? "sliding_attention" : "full_attention");
  LOOM_ASSIGN_OR_RETURN(MoeConfig m, read_moe_config(c, MoeFamily::kMixtral));
  c.num_experts = m.num_experts;
  c.num_experts_per_tok = m.top_k;
  return Status::Ok();
}

Status resolve_qwen2_moe_config(ModelConfig& c) {
  LOOM_RETURN_IF_ERROR(apply_defaults(c, {5632, 16, 32768, 1e-6, 10000.0, std::nullopt, {}}));
  // As Qwen2: the window counts only with use_sliding_window.
  if (!c.use_sliding_window) {
    c.sliding_window.reset();
    c.layer_types.assign(static_cast<size_t>(c.num_hidden_layers), "full_attention");
  } else {
    if (!c.sliding_window) c.sliding_window = 4096;
    if (!c.raw.contains("layer_types"))
      return unsupported(c.source + ": use_sliding_window without layer_types: Transformers versions disagree on "
                                    "which Qwen2-MoE layers slide; give layer_types explicitly");
  }
  LOOM_ASSIGN_OR_RETURN(MoeConfig m, read_moe_config(c, MoeFamily::kQwen2Moe));
  c.num_experts = m.num_experts;
  c.num_experts_per_tok = m.top_k;
  return Status::Ok();
}

Status resolve_qwen3_moe_config(ModelConfig& c) {
  LOOM_RETURN_IF_ERROR(apply_defaults(c, {6144, 4, 32768, 1e-6, 10000.0, std::nullopt, {}}));
  // Qwen3MoeConfig keeps sliding_window only with use_sliding_window, and then
  // every layer's attention gets it (the model builds one sliding mask); it has
  // no layer_types.
  c.layer_types.assign(static_cast<size_t>(c.num_hidden_layers), "full_attention");
  if (!c.use_sliding_window) {
    c.sliding_window.reset();
  } else {
    if (!c.sliding_window && !c.raw.contains("sliding_window")) c.sliding_window = 4096;
    if (c.sliding_window) c.layer_types.assign(static_cast<size_t>(c.num_hidden_layers), "sliding_attention");
  }
  LOOM_ASSIGN_OR_RETURN(MoeConfig m, read_moe_config(c, MoeFamily::kQwen3Moe));
  c.num_experts = m.num_experts;
  c.num_experts_per_tok = m.top_k;
  return Status::Ok();
}

// Qwen2MoeDecoderLayer, Qwen3MoeDecoderLayer: sparse unless listed in
// mlp_only_layers or off the decoder_sparse_step grid.
bool qwen_layer_is_sparse(const MoeConfig& m, int64_t layer) {
  return std::find(m.mlp_only_layers.begin(), m.mlp_only_layers.end(), layer) == m.mlp_only_layers.end() &&
         m.num_experts > 0 && (layer + 1) % m.decoder_sparse_step == 0;
}

Result<std::unique_ptr<CausalLM>> build_moe(const ModelConfig& c, MoeFamily family) {
  LOOM_ASSIGN_OR_RETURN(MoeConfig m, read_moe_config(c, family));
  const bool qwen = family != MoeFamily::kMixtral;
  const char* base_type = family == MoeFamily::kMixtral ? "mistral" : family == MoeFamily::kQwen2Moe ? "qwen2" : "qwen3";
  const Architecture* base = find_architecture_by_type(base_type);
  if (!base) return internal_error("the registry has no dense base architecture for " + c.model_type);
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<CausalLM> dense, base->build(c));
  DecoderSettings s = dense->settings();
  const std::string prefix = family == MoeFamily::kMixtral ? "Mixtral" : family == MoeFamily::kQwen2Moe ? "Qwen2Moe" : "Qwen3Moe";
  s.class_prefix = prefix;
  s.class_name.clear();
  // Qwen3-MoE keeps the Qwen3 decoder's attention (biases per attention_bias, q/k norms).
  if (family != MoeFamily::kQwen3Moe)
    for (AttentionSettings& a : s.layers) a.qkv_bias = m.qkv_bias;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    MoeSettings e;
    if (!qwen || qwen_layer_is_sparse(m, i)) {
      e.num_experts = m.num_experts;
      e.top_k = m.top_k;
      e.intermediate_size = m.moe_intermediate;
      e.norm_topk_prob = m.norm_topk_prob;
      e.shared_intermediate_size = qwen ? m.shared_intermediate : 0;
      e.block_class = prefix + "SparseMoeBlock";
      e.experts_class = prefix + "Experts";
      e.shared_class = prefix + "MLP";
    }
    s.moe_layers.push_back(e);
  }
  return std::make_unique<CausalLM>(s);
}

// Optional: a checkpoint already in the stacked layout passes straight through.
WeightRules mixtral_rules(const ModelConfig&) {
  WeightRenaming rename{"block_sparse_moe", "mlp", true, "Mixtral block_sparse_moe → mlp"};
  return {
      rename,
      WeightConverter{{"mlp.experts.*.w1.weight", "mlp.experts.*.w3.weight"},
                      {"mlp.experts.gate_up_proj"},
                      {MergeModulelist(0), Concatenate(1)},
                      true,
                      "Mixtral experts w1|w3 → gate_up_proj"},
      WeightConverter{{"mlp.experts.*.w2.weight"}, {"mlp.experts.down_proj"}, {MergeModulelist(0)}, true,
                      "Mixtral experts w2 → down_proj"},
  };
}

// Qwen2-MoE and Qwen3-MoE name their experts alike.
WeightRules qwen_moe_rules(const std::string& family) {
  return {
      WeightConverter{{"mlp.experts.*.gate_proj.weight", "mlp.experts.*.up_proj.weight"},
                      {"mlp.experts.gate_up_proj"},
                      {MergeModulelist(0), Concatenate(1)},
                      true,
                      family + " experts gate_proj|up_proj → gate_up_proj"},
      WeightConverter{{"mlp.experts.*.down_proj.weight"}, {"mlp.experts.down_proj"}, {MergeModulelist(0)}, true,
                      family + " experts down_proj"},
  };
}


}  // namespace

Architecture mixtral_architecture() {
  return Architecture{.model_type = "mixtral",
                      .class_name = "MixtralForCausalLM",
                      .resolve_config = resolve_mixtral_config,
                      .build = [](const ModelConfig& c) { return build_moe(c, MoeFamily::kMixtral); },
                      .weight_rules = mixtral_rules,
                      .expected_unused = tied_lm_head_unused};
}

Architecture qwen2_moe_architecture() {
  return Architecture{.model_type = "qwen2_moe",
                      .class_name = "Qwen2MoeForCausalLM",
                      .resolve_config = resolve_qwen2_moe_config,
                      .build = [](const ModelConfig& c) { return build_moe(c, MoeFamily::kQwen2Moe); },
                      .weight_rules = [](const ModelConfig&) { return qwen_moe_rules("Qwen2-MoE"); },
                      .expected_unused = tied_lm_head_unused};
}

Architecture qwen3_moe_architecture() {
  return Architecture{.model_type = "qwen3_moe",
                      .class_name = "Qwen3MoeForCausalLM",
                      .resolve_config = resolve_qwen3_moe_config,
                      .build = [](const ModelConfig& c) { return build_moe(c, MoeFamily::kQwen3Moe); },
                      .weight_rules = [](const ModelConfig&) { return qwen_moe_rules("Qwen3-MoE"); },
                      .expected_unused = tied_lm_head_unused};
}

}  // namespace loom::models
