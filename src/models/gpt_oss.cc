// GptOssForCausalLM (modeling_gpt_oss.py) on the shared decoder: Llama's layer
// (RMSNorms, which gpt-oss computes in f32 as loom always does) with
//  - biases on q/k/v/o (attention_bias, true by default),
//  - a learned sink logit per query head (self_attn.sinks) joining each
//    softmax's denominator,
//  - sliding (window 128) and full layers alternating as layer_types says (the
//    even layers slide when it is absent),
//  - YaRN RoPE by default (factor 32 over 4096 positions, truncate false),
//  - every MLP a sparse MoE (GptOssMLP): a biased router, the top
//    num_experts_per_tok router logits then a softmax over those k, biased
//    experts with the clamped SwiGLU (swiglu_limit, alpha 1.702).
//
// The checkpoint holds the experts as GptOssExperts does: gate_up_proj
// [E, H, 2I] with gate and up in alternating columns, gate_up_proj_bias [E, 2I]
// (alternating too), down_proj [E, I, H], down_proj_bias [E, H]. The weight
// rules turn them into loom's moe layout (gate_up [E, 2I, H], gate rows then up
// rows; down [E, H, I]) and save_pretrained turns them back.
#include "models/gpt_oss.h"
#include "models/config_json.h"
#include "models/decoder_config.h"

#include <cmath>
#include <string>

namespace loom::models {
namespace {

using nlohmann::json;

// GptOssConfig's defaults (configuration_gpt_oss.py) for what config.json
// omits, written in before ModelConfig's generic parse.
Status adapt_gpt_oss_json(json& j) {
  auto fill = [&j](const char* key, json value) {
    if (absent(j, key)) j[key] = std::move(value);
  };
  fill("vocab_size", 201088);
  fill("hidden_size", 2880);
  fill("intermediate_size", 2880);
  fill("num_hidden_layers", 36);
  fill("num_attention_heads", 64);
  fill("num_key_value_heads", 8);
  fill("head_dim", 64);
  fill("max_position_embeddings", 131072);
  fill("rms_norm_eps", 1e-5);
  fill("rope_theta", 150000.0);
  fill("tie_word_embeddings", false);
  fill("sliding_window", 128);
  fill("attention_bias", true);
  // GptOssExperts hard-codes its activation; hidden_act names nothing gpt-oss runs.
  j["hidden_act"] = "silu";
  // GptOssConfig: a missing layer_types slides the even layers.
  if (absent(j, "layer_types")) {
    if (!j.at("num_hidden_layers").is_number_integer())
      return parse_error("config.json: num_hidden_layers must be an integer");
    const int64_t n = j.at("num_hidden_layers").get<int64_t>();
    if (n < 0 || n > 100000) return parse_error("config.json: num_hidden_layers out of range");
    json types = json::array();
    for (int64_t i = 0; i < n; ++i) types.push_back((i + 1) % 2 ? "sliding_attention" : "full_attention");
    j["layer_types"] = std::move(types);
  }
  // The default rope_scaling is YaRN; a rope dict without a type gets it too.
  const char* rope_key = !absent(j, "rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (absent(j, rope_key)) j[rope_key] = json::object();
  json& rope = j[rope_key];
  if (!rope.is_object()) return parse_error(std::string("config.json: ") + rope_key + " must be an object");
  if (absent(rope, "rope_type") && absent(rope, "type")) {
    rope["rope_type"] = "yarn";
    rope["factor"] = 32.0;
    rope["beta_fast"] = 32.0;
    rope["beta_slow"] = 1.0;
    rope["truncate"] = false;
    rope["original_max_position_embeddings"] = 4096;
  }
  return Status::Ok();
}

struct GptOssMoe {
  int64_t num_experts = 128, top_k = 4;
  double swiglu_limit = 7.0, swiglu_alpha = 1.702;
};

Result<double> number_or(const ModelConfig& c, const char* key, double fallback) {
  if (absent(c.raw, key)) return fallback;
  const json& v = c.raw.at(key);
  if (!v.is_number()) return parse_error(c.source + ": field '" + key + "' must be a number");
  return v.get<double>();
}

Result<int64_t> integer_or(const ModelConfig& c, const char* key, int64_t fallback) {
  if (absent(c.raw, key)) return fallback;
  const json& v = c.raw.at(key);
  if (!v.is_number_integer()) return parse_error(c.source + ": field '" + key + "' must be an integer");
  return v.get<int64_t>();
}

Result<GptOssMoe> read_moe(const ModelConfig& c) {
  GptOssMoe m;
  LOOM_ASSIGN_OR_RETURN(m.num_experts, integer_or(c, "num_local_experts", 128));
  // GptOssConfig reads num_experts_per_tok; the released configs' experts_per_token
  // is an extra key Transformers ignores, and so does loom.
  LOOM_ASSIGN_OR_RETURN(m.top_k, integer_or(c, "num_experts_per_tok", 4));
  // swiglu_limit: a field of GptOssConfig (7.0); alpha is GptOssExperts' constant.
  LOOM_ASSIGN_OR_RETURN(m.swiglu_limit, number_or(c, "swiglu_limit", 7.0));
  LOOM_ASSIGN_OR_RETURN(m.swiglu_alpha, number_or(c, "swiglu_alpha", 1.702));
  if (m.num_experts <= 0) return invalid_argument(c.source + ": num_local_experts must be positive");
  if (m.top_k < 1 || m.top_k > m.num_experts)
    return invalid_argument(c.source + ": num_experts_per_tok (" + std::to_string(m.top_k) + ") must be in [1, " +
                            std::to_string(m.num_experts) + "]");
  if (!(m.swiglu_limit > 0) || !std::isfinite(m.swiglu_limit))
    return invalid_argument(c.source + ": swiglu_limit must be positive and finite");
  if (!std::isfinite(m.swiglu_alpha)) return invalid_argument(c.source + ": swiglu_alpha must be finite");
  return m;
}

// quantization_config: none, or "mxfp4" (the released checkpoints: every expert
// matrix as *_blocks + *_scales). Other methods are refused by name.
Result<bool> mxfp4_experts(const ModelConfig& c) {
  if (absent(c.raw, "quantization_config")) return false;
  const json& q = c.raw.at("quantization_config");
  if (!q.is_object() || !q.contains("quant_method") || !q.at("quant_method").is_string())
    return parse_error(c.source + ": quantization_config must be an object with a string quant_method");
  const std::string method = q.at("quant_method").get<std::string>();
  if (method != "mxfp4")
    return unsupported(c.source + ": quantization_config.quant_method '" + method +
                       "' is not supported for gpt_oss (loom reads mxfp4, the released checkpoints' experts)");
  return true;
}

Status resolve_gpt_oss_config(ModelConfig& c) {
  LOOM_RETURN_IF_ERROR(mxfp4_experts(c).status());
  LOOM_ASSIGN_OR_RETURN(GptOssMoe m, read_moe(c));
  c.num_experts = m.num_experts;
  c.num_experts_per_tok = m.top_k;
  for (size_t i = 0; i < c.layer_types.size(); ++i)
    if (c.layer_types[i] != "sliding_attention" && c.layer_types[i] != "full_attention")
      return invalid_argument(c.source + ": layer_types entry " + std::to_string(i) + " is '" + c.layer_types[i] +
                              "' (expected full_attention or sliding_attention)");
  return Status::Ok();
}

Result<std::unique_ptr<CausalLM>> build_gpt_oss(const ModelConfig& c) {
  LOOM_ASSIGN_OR_RETURN(GptOssMoe m, read_moe(c));
  if (c.intermediate_size <= 0) return invalid_argument(c.source + ": intermediate_size must be positive");
  // Llama's decoder reads attention_bias for q/k/v/o, the windows from
  // layer_types and the rope from rope_scaling, as GptOssAttention does.
  const Architecture* base = find_architecture_by_type("llama");
  if (!base) return internal_error("the registry has no llama architecture for gpt_oss");
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<CausalLM> dense, base->build(c));
  DecoderSettings s = dense->settings();
  s.class_prefix = "GptOss";
  s.class_name.clear();
  s.mlp_bias = false;
  for (AttentionSettings& a : s.layers) {
    a.qkv_bias = a.o_bias = c.attention_bias;
    a.sinks = true;
  }
  s.moe_layers.clear();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    MoeSettings e;
    e.num_experts = m.num_experts;
    e.top_k = m.top_k;
    e.intermediate_size = c.intermediate_size;
    e.norm_topk_prob = false;
    e.routing = "topk_softmax";
    e.router_name = "router";
    e.router_bias = true;
    e.expert_bias = true;
    e.swiglu_limit = m.swiglu_limit;
    e.swiglu_alpha = m.swiglu_alpha;
    e.block_class = "GptOssMLP";
    e.experts_class = "GptOssExperts";
    s.moe_layers.push_back(e);
  }
  return std::make_unique<CausalLM>(s);
}

// GptOssExperts' layout → loom's: gate_up_proj [E, H, 2I] with gate in the even
// columns and up in the odd ones becomes [E, 2I, H] with the gate rows first
// (per expert, the interleaved → half-split row order PermuteForRope makes of
// one "head" of 2I rows); its bias likewise; down_proj [E, I, H] → [E, H, I].
//
// With quantization_config mxfp4 the two matrices come as *_blocks + *_scales
// in [E, out, in] row order already (the transpose of the parameters above):
// they become loom's MXFP4 tensors without a float in between
// (Mxfp4FromBlocks), and the gate/up rows are de-interleaved as above.
WeightRules gpt_oss_rules(const ModelConfig& c) {
  const int64_t gate_up = 2 * c.intermediate_size;
  const WeightConverter bias{{"mlp.experts.gate_up_proj_bias"},
                             {"mlp.experts.gate_up_proj_bias"},
                             {SplitModulelist(0), PermuteForRope(1, gate_up), MergeModulelist(0)},
                             false,
                             "gpt-oss experts gate_up_proj_bias (gate/up interleaved) → (gate | up)"};
  const Result<bool> mxfp4 = mxfp4_experts(c);  // checked by resolve_gpt_oss_config
  if (mxfp4.ok() && mxfp4.value())
    return {
        WeightConverter{{"mlp.experts.gate_up_proj_blocks", "mlp.experts.gate_up_proj_scales"},
                        {"mlp.experts.gate_up_proj"},
                        {Mxfp4FromBlocks(), SplitModulelist(0), PermuteForRope(1, gate_up), MergeModulelist(0)},
                        false,
                        "gpt-oss MXFP4 experts gate_up_proj_blocks|scales [E, 2I, H] (gate/up interleaved) → "
                        "[E, 2I, H] (gate | up)"},
        bias,
        WeightConverter{{"mlp.experts.down_proj_blocks", "mlp.experts.down_proj_scales"},
                        {"mlp.experts.down_proj"},
                        {Mxfp4FromBlocks()},
                        false,
                        "gpt-oss MXFP4 experts down_proj_blocks|scales → [E, H, I]"},
    };
  return {
      WeightConverter{{"mlp.experts.gate_up_proj"},
                      {"mlp.experts.gate_up_proj"},
                      {Transpose(1, 2), SplitModulelist(0), PermuteForRope(1, gate_up), MergeModulelist(0)},
                      false,
                      "gpt-oss experts gate_up_proj [E, H, 2I] (gate/up interleaved) → [E, 2I, H] (gate | up)"},
      bias,
      WeightConverter{{"mlp.experts.down_proj"}, {"mlp.experts.down_proj"}, {Transpose(1, 2)}, false,
                      "gpt-oss experts down_proj [E, I, H] → [E, H, I]"},
  };
}

}  // namespace

Architecture gpt_oss_architecture() {
  return Architecture{.model_type = "gpt_oss",
                      .class_name = "GptOssForCausalLM",
                      .adapt_config_json = adapt_gpt_oss_json,
                      .resolve_config = resolve_gpt_oss_config,
                      .build = build_gpt_oss,
                      .weight_rules = gpt_oss_rules,
                      .expected_unused = tied_lm_head_unused};
}

}  // namespace loom::models
