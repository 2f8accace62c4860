// Granite (modeling_granite.py): Llama's decoder with its μP multipliers —
// token embeddings times embedding_multiplier, attention scores scaled by
// attention_multiplier (instead of head_dim^-0.5), each sublayer's output times
// residual_multiplier before its residual add, and the logits divided by
// logits_scaling.
#include "models/config_json.h"
#include "models/olmo2.h"
#include "models/rope_config.h"
#include "models/decoder_config.h"

namespace loom::models {
namespace {

// GraniteConfig's defaults where ModelConfig's generic ones differ.
Status adapt_granite_json(nlohmann::json& j) {
  auto fill = [&j](const char* key, nlohmann::json value) {
    if (absent(j, key)) j[key] = std::move(value);
  };
  fill("vocab_size", 32000);
  fill("hidden_size", 4096);
  fill("intermediate_size", 11008);
  fill("num_hidden_layers", 32);
  fill("num_attention_heads", 32);
  fill("max_position_embeddings", 2048);
  fill("rms_norm_eps", 1e-6);
  fill("bos_token_id", 1);
  fill("eos_token_id", 2);
  fill("tie_word_embeddings", false);
  if (!absent(j, "sliding_window")) j["sliding_window"] = nullptr;  // GraniteAttention has no window
  j.erase("layer_types");
  for (const char* key : {"embedding_multiplier", "logits_scaling", "residual_multiplier", "attention_multiplier"}) {
    fill(key, 1.0);
    if (!j.at(key).is_number()) return parse_error(std::string("config.json: ") + key + " must be a number");
  }
  return Status::Ok();
}

Result<std::unique_ptr<CausalLM>> build_granite(const ModelConfig& c) {
  if (c.hidden_act != "silu" && c.hidden_act != "gelu" && c.hidden_act != "gelu_pytorch_tanh")
    return unsupported(c.source + ": hidden_act '" + c.hidden_act + "' is not supported (silu, gelu, gelu_pytorch_tanh)");
  auto number = [&c](const char* key) { return c.raw.at(key).get<double>(); };
  const double embedding = number("embedding_multiplier"), logits = number("logits_scaling"),
               residual = number("residual_multiplier"), attention = number("attention_multiplier");
  if (!(logits != 0)) return invalid_argument(c.source + ": logits_scaling must not be 0 (the logits are divided by it)");
  if (!(attention > 0)) return invalid_argument(c.source + ": attention_multiplier must be positive");
  DecoderSettings s;
  s.class_prefix = "Granite";
  s.vocab_size = c.vocab_size;
  s.hidden_size = c.hidden_size;
  s.intermediate_size = c.intermediate_size;
  s.norm_eps = c.rms_norm_eps;
  s.hidden_act = c.hidden_act;
  s.mlp_bias = c.mlp_bias;
  s.tie_word_embeddings = c.tie_word_embeddings;
  // embedding_scale 0 records no op; any other multiplier (1 included) is its factor.
  s.embedding_scale = embedding == 1.0 ? 0.0 : embedding;
  s.residual_multiplier = residual;
  s.logits_scaling = logits;
  if (embedding == 0.0) return invalid_argument(c.source + ": embedding_multiplier 0 zeroes every embedding");
  const RopeSettings rope = rope_from_config(c);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    AttentionSettings a = attention_from_config(c, i);
    a.scale = attention;
    a.rope = rope;
    s.layers.push_back(a);
  }
  return std::make_unique<CausalLM>(s);
}

}  // namespace

Architecture granite_architecture() {
  return Architecture{.model_type = "granite",
                      .class_name = "GraniteForCausalLM",
                      .adapt_config_json = adapt_granite_json,
                      .resolve_config = {},
                      .build = build_granite,
                      .weight_rules = [](const ModelConfig&) { return WeightRules{}; },
                      .expected_unused = tied_lm_head_unused};
}

}  // namespace loom::models
