// The Llama family (one decoder, four configurations) and Phi-3, the same
// decoder stored with fused qkv_proj / gate_up_proj tensors.
#include <cmath>

#include "loom/models/architecture.h"
#include "models/gemma2.h"
#include "models/gemma3.h"
#include "models/rope_config.h"
#include "models/olmo2.h"
#include "models/smollm3.h"
#include "models/gpt2.h"
#include "models/gpt_oss.h"
#include "models/moe_architectures.h"
#include "models/decoder_config.h"

namespace loom::models {

RopeSettings rope_from_config(const ModelConfig& c) {
  RopeSettings r;
  r.theta = c.rope_theta;
  r.max_position_embeddings = c.max_position_embeddings;
  r.original_max_position_embeddings = c.max_position_embeddings;
  const RopeScaling& s = c.rope_scaling;
  r.type = s.rope_type;
  r.factor = s.factor;
  r.low_freq_factor = s.low_freq_factor;
  r.high_freq_factor = s.high_freq_factor;
  if (s.original_max_position_embeddings > 0) r.original_max_position_embeddings = s.original_max_position_embeddings;
  r.beta_fast = s.beta_fast;
  r.beta_slow = s.beta_slow;
  // ModelConfig uses 0 for "not given"; Transformers treats a missing mscale as None.
  if (s.mscale > 0) r.mscale = s.mscale;
  if (s.mscale_all_dim > 0) r.mscale_all_dim = s.mscale_all_dim;
  if (s.attention_factor_given) r.attention_factor = s.attention_factor;
  r.truncate = s.truncate;
  if (s.rope_type == "longrope") {
    r.long_factor = s.long_factor;
    r.short_factor = s.short_factor;
    r.attention_factor = s.attention_factor;  // resolved by the config parser
  }
  const int64_t rotary = c.rotary_dim();
  r.rotary_dim = rotary - rotary % 2;
  return r;
}

namespace {

// What each Transformers class hard-codes instead of reading from config.json.
struct FamilyTraits {
  const char* prefix;
  bool qkv_bias_always;         // Qwen2: q/k/v have biases, o_proj none, whatever the config says
  bool reads_attention_bias;    // Llama, Qwen3 honour attention_bias; Mistral has no biases
  bool reads_mlp_bias;          // only Llama honours mlp_bias
  bool qk_norm;                 // Qwen3
};

Result<std::unique_ptr<CausalLM>> build_decoder(const ModelConfig& c, const FamilyTraits& t) {
  if (c.hidden_act != "silu" && c.hidden_act != "gelu" && c.hidden_act != "gelu_pytorch_tanh")
    return unsupported("config.json: hidden_act '" + c.hidden_act + "' is not supported (silu, gelu, gelu_pytorch_tanh)");
  DecoderSettings s;
  s.class_prefix = t.prefix;
  s.vocab_size = c.vocab_size;
  s.hidden_size = c.hidden_size;
  s.intermediate_size = c.intermediate_size;
  s.norm_eps = c.rms_norm_eps;
  s.hidden_act = c.hidden_act;
  s.mlp_bias = t.reads_mlp_bias && c.mlp_bias;
  s.tie_word_embeddings = c.tie_word_embeddings;
  const RopeSettings rope = rope_from_config(c);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    AttentionSettings a;
    a.layer = static_cast<int>(i);
    a.hidden = c.hidden_size;
    a.num_heads = c.num_attention_heads;
    a.num_kv_heads = c.num_key_value_heads;
    a.head_dim = c.head_dim;
    a.qkv_bias = t.qkv_bias_always || (t.reads_attention_bias && c.attention_bias);
    a.o_bias = t.reads_attention_bias && c.attention_bias;
    a.qk_norm = t.qk_norm;
    a.norm_eps = c.rms_norm_eps;
    LOOM_RETURN_IF_ERROR(apply_layer_window(a, c, i));
    a.rope = rope;
    s.layers.push_back(a);
  }
  return std::make_unique<CausalLM>(s);
}

// Phi3Config's defaults where they differ from ModelConfig's generic ones, and
// its attention pattern: with a sliding_window every layer slides
// (Phi3Model picks create_sliding_window_causal_mask for the whole stack).
Status resolve_phi3_config(ModelConfig& c) {
  const nlohmann::json& raw = c.raw;
  auto absent = [&raw](const char* key) { return !raw.contains(key) || raw.at(key).is_null(); };
  if (absent("tie_word_embeddings")) c.tie_word_embeddings = false;
  if (absent("rms_norm_eps")) c.rms_norm_eps = 1e-5;
  if (absent("bos_token_id")) c.bos_token_id = 1;
  if (absent("eos_token_id")) c.eos_token_ids = {32000};
  if (absent("pad_token_id")) c.pad_token_id = 32000;
  if (!raw.contains("layer_types"))
    c.layer_types.assign(static_cast<size_t>(c.num_hidden_layers), c.sliding_window ? "sliding_attention" : "full_attention");
  if (!absent("attention_bias") && raw.at("attention_bias").is_boolean() && raw.at("attention_bias").get<bool>())
    return unsupported(c.source + ": attention_bias true: Phi3ForCausalLM's qkv_proj and o_proj have no bias");
  return Status::Ok();
}

// The checkpoint fuses q/k/v and gate/up; loom's modules keep them apart, so
// the load plan chunks them (sizes from the targets: q is larger than k and v
// under GQA) and save concatenates them back.
WeightRules phi3_rules(const ModelConfig&) {
  return {
      WeightConverter{{"self_attn.qkv_proj.weight"},
                      {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"},
                      {Chunk(0)}, false, "Phi3 qkv_proj"},
      WeightConverter{{"mlp.gate_up_proj.weight"}, {"mlp.gate_proj.weight", "mlp.up_proj.weight"}, {Chunk(0)}, false,
                      "Phi3 gate_up_proj"},
  };
}


std::vector<Architecture> make_architectures() {
  auto family = [](const char* type, const char* cls, FamilyTraits t) {
    return Architecture{.model_type = type,
                        .class_name = cls,
                        .build = [t](const ModelConfig& c) { return build_decoder(c, t); },
                        .weight_rules = [](const ModelConfig&) { return WeightRules{}; },
                        .expected_unused = tied_lm_head_unused};
  };
  return {
      family("llama", "LlamaForCausalLM", {"Llama", false, true, true, false}),
      family("mistral", "MistralForCausalLM", {"Mistral", false, false, false, false}),
      family("qwen2", "Qwen2ForCausalLM", {"Qwen2", true, false, false, false}),
      family("qwen3", "Qwen3ForCausalLM", {"Qwen3", false, true, false, true}),
      Architecture{.model_type = "phi3",
                   .class_name = "Phi3ForCausalLM",
                   .resolve_config = resolve_phi3_config,
                   .build = [](const ModelConfig& c) { return build_decoder(c, {"Phi3", false, false, false, false}); },
                   .weight_rules = phi3_rules,
                   .expected_unused = tied_lm_head_unused},
      gpt2_architecture(),
      gemma2_architecture(),
      gemma3_text_architecture(),
      gemma3_architecture(),
      smollm3_architecture(),
      olmo2_architecture(),
      granite_architecture(),
      mixtral_architecture(),
      qwen2_moe_architecture(),
      qwen3_moe_architecture(),
      gpt_oss_architecture(),
  };
}

}  // namespace

const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> table = make_architectures();
  return table;
}

const Architecture* find_architecture_by_type(const std::string& model_type) {
  for (const auto& a : architectures())
    if (a.model_type == model_type) return &a;
  return nullptr;
}

Result<const Architecture*> find_architecture(const ModelConfig& config) {
  for (const auto& a : architectures())
    if (a.model_type == config.model_type) return &a;
  for (const auto& name : config.architectures)
    for (const auto& a : architectures())
      if (a.class_name == name) return &a;
  std::string supported;
  for (const auto& a : architectures()) supported += (supported.empty() ? "" : ", ") + a.model_type;
  return unsupported("config.json: model_type '" + config.model_type + "' is not supported (supported: " + supported + ")");
}

}  // namespace loom::models
