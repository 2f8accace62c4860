// SmolLM3 (modeling_smollm3.py): Llama's decoder layer (LlamaAttention with
// attention_bias on q/k/v/o, LlamaMLP), where layer i rotates q and k only if
// no_rope_layers[i] is 1 — by default every no_rope_layer_interval-th (4th)
// layer is a NoPE layer — and, with use_sliding_window, the NoPE layers slide.
#include "models/smollm3.h"

#include "models/config_json.h"
#include "models/rope_config.h"
#include "models/decoder_config.h"

namespace loom::models {
namespace {

// SmolLM3Config's defaults and its derived no_rope_layers / layer_types, written
// in before ModelConfig's generic parse.
Status adapt_smollm3_json(nlohmann::json& j) {
  auto fill = [&j](const char* key, nlohmann::json value) {
    if (absent(j, key)) j[key] = std::move(value);
  };
  fill("vocab_size", 128256);
  fill("hidden_size", 2048);
  fill("intermediate_size", 11008);
  fill("num_hidden_layers", 36);
  fill("num_attention_heads", 16);
  fill("num_key_value_heads", 4);
  fill("max_position_embeddings", 32768);
  fill("rms_norm_eps", 1e-6);
  fill("pad_token_id", 128004);
  fill("bos_token_id", 128000);
  fill("eos_token_id", 128001);
  if (absent(j, "rope_theta") && absent(j, "rope_parameters")) j["rope_theta"] = 2000000.0;
  if (!j.at("num_hidden_layers").is_number_integer()) return parse_error("config.json: num_hidden_layers must be an integer");
  const int64_t n = j.at("num_hidden_layers").get<int64_t>();
  if (n < 0 || n > (1 << 16)) return parse_error("config.json: num_hidden_layers out of range");
  nlohmann::json rope_layers = nlohmann::json::array();
  if (absent(j, "no_rope_layers")) {
    int64_t interval = 4;
    if (!absent(j, "no_rope_layer_interval")) {
      if (!j.at("no_rope_layer_interval").is_number_integer() || j.at("no_rope_layer_interval").get<int64_t>() <= 0)
        return parse_error("config.json: no_rope_layer_interval must be a positive integer");
      interval = j.at("no_rope_layer_interval").get<int64_t>();
    }
    for (int64_t i = 0; i < n; ++i) rope_layers.push_back((i + 1) % interval != 0 ? 1 : 0);
  } else {
    const nlohmann::json& given = j.at("no_rope_layers");
    if (!given.is_array() || static_cast<int64_t>(given.size()) < n)
      return parse_error("config.json: no_rope_layers must be a list with an entry per layer (" + std::to_string(n) + ")");
    for (int64_t i = 0; i < n; ++i) {
      const nlohmann::json& v = given.at(static_cast<size_t>(i));
      if (!v.is_number_integer() && !v.is_boolean())
        return parse_error("config.json: no_rope_layers entry " + std::to_string(i) + " must be 0 or 1");
      rope_layers.push_back(v.is_boolean() ? (v.get<bool>() ? 1 : 0) : (v.get<int64_t>() != 0 ? 1 : 0));
    }
  }
  j["no_rope_layers"] = rope_layers;
  const bool use_window = !absent(j, "use_sliding_window") && j.at("use_sliding_window").is_boolean() &&
                          j.at("use_sliding_window").get<bool>();
  if (!use_window) j["sliding_window"] = nullptr;  // SmolLM3Attention: a window only with use_sliding_window
  if (absent(j, "layer_types")) {
    nlohmann::json types = nlohmann::json::array();
    for (int64_t i = 0; i < n; ++i)
      types.push_back(use_window && !absent(j, "sliding_window") && rope_layers[static_cast<size_t>(i)] == 0
                          ? "sliding_attention"
                          : "full_attention");
    j["layer_types"] = std::move(types);
  }
  return Status::Ok();
}

Result<std::unique_ptr<CausalLM>> build_smollm3(const ModelConfig& c) {
  if (c.hidden_act != "silu" && c.hidden_act != "gelu" && c.hidden_act != "gelu_pytorch_tanh")
    return unsupported(c.source + ": hidden_act '" + c.hidden_act + "' is not supported (silu, gelu, gelu_pytorch_tanh)");
  if (c.layer_types.size() != static_cast<size_t>(c.num_hidden_layers))
    return invalid_argument(c.source + ": layer_types has " + std::to_string(c.layer_types.size()) +
                            " entries but num_hidden_layers is " + std::to_string(c.num_hidden_layers));
  DecoderSettings s;
  s.class_prefix = "SmolLM3";
  s.vocab_size = c.vocab_size;
  s.hidden_size = c.hidden_size;
  s.intermediate_size = c.intermediate_size;
  s.norm_eps = c.rms_norm_eps;
  s.hidden_act = c.hidden_act;
  s.mlp_bias = c.mlp_bias;
  s.tie_word_embeddings = c.tie_word_embeddings;
  const RopeSettings rope = rope_from_config(c);
  const nlohmann::json& rope_layers = c.raw.at("no_rope_layers");
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string& type = c.layer_types[static_cast<size_t>(i)];
    if (type != "sliding_attention" && type != "full_attention")
      return invalid_argument(c.source + ": layer_types entry " + std::to_string(i) + " is '" + type +
                              "' (expected full_attention or sliding_attention)");
    AttentionSettings a = attention_from_config(c, i);
    a.use_rope = rope_layers.at(static_cast<size_t>(i)).get<int64_t>() != 0;
    LOOM_RETURN_IF_ERROR(apply_layer_window(a, c, i));
    a.rope = rope;
    s.layers.push_back(a);
  }
  return std::make_unique<CausalLM>(s);
}

}  // namespace

Architecture smollm3_architecture() {
  return Architecture{.model_type = "smollm3",
                      .class_name = "SmolLM3ForCausalLM",
                      .adapt_config_json = adapt_smollm3_json,
                      .resolve_config = {},
                      .build = build_smollm3,
                      .weight_rules = [](const ModelConfig&) { return WeightRules{}; },
                      .expected_unused = tied_lm_head_unused};
}

}  // namespace loom::models
