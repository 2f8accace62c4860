#include "loom/io/model_config.h"

#include <cmath>
#include <filesystem>
#include <limits>

#include "loom/io/json_fields.h"
#include "loom/io/json_file.h"
#include "loom/core/logging.h"

namespace loom {
namespace {

using io::JsonFields;
using nlohmann::json;

// How a model_type lays out sliding-window attention (see ModelConfig::layer_types).
enum class WindowRule { kNone, kQwen, kMistral, kGeneric };

// The values Transformers' config class uses when config.json omits a field.
struct TypeDefaults {
  bool known = false;
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0, num_attention_heads = 0;
  std::optional<int64_t> num_key_value_heads;  // nullopt: num_attention_heads
  std::optional<int64_t> head_dim;             // nullopt: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  bool tie_word_embeddings = true;  // PretrainedConfig's default
  WindowRule window = WindowRule::kGeneric;
};

TypeDefaults defaults_for(const std::string& model_type) {
  TypeDefaults d;
  if (model_type == "llama") {  // LlamaConfig
    d = {true, 32000, 4096, 11008, 32, 32, std::nullopt, std::nullopt, 2048, 1, {2}, false, WindowRule::kNone};
  } else if (model_type == "qwen2") {  // Qwen2Config
    d = {true, 151936, 4096, 22016, 32, 32, 32, std::nullopt, 32768, std::nullopt, {}, false, WindowRule::kQwen};
  } else if (model_type == "qwen3") {  // Qwen3Config
    d = {true, 151936, 4096, 22016, 32, 32, 32, 128, 32768, std::nullopt, {}, false, WindowRule::kQwen};
  } else if (model_type == "mistral") {  // MistralConfig
    d = {true, 32000, 4096, 14336, 32, 32, 8, std::nullopt, 4096 * 32, 1, {2}, false, WindowRule::kMistral};
  }
  return d;
}

// get_mscale from Transformers' YaRN.
double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// Transformers' _compute_longrope_parameters: `factor` defaults to max / original
// max positions (Phi-3 sets neither in rope_scaling), the original length to a
// top-level original_max_position_embeddings, else max_position_embeddings; the
// attention factor, when not given, is sqrt(1 + ln(factor) / ln(original)).
Status parse_longrope(const json& rope, const JsonFields& r, const JsonFields& top, ModelConfig& cfg) {
  RopeScaling& rs = cfg.rope_scaling;
  for (const char* key : {"long_factor", "short_factor"}) {
    if (!rope.contains(key) || !rope.at(key).is_array() || rope.at(key).empty())
      return parse_error(r.where() + ": rope_type 'longrope' needs '" + key + "', a non-empty list of numbers");
    std::vector<double>& out = std::string(key) == "long_factor" ? rs.long_factor : rs.short_factor;
    for (const json& v : rope.at(key)) {
      if (!v.is_number() || !(v.get<double>() > 0))
        return r.bad_value(key, "must hold positive numbers only, got " + v.dump());
      out.push_back(v.get<double>());
    }
  }
  if (rs.long_factor.size() != rs.short_factor.size())
    return r.bad_value("long_factor", "has " + std::to_string(rs.long_factor.size()) + " values, short_factor " +
                                          std::to_string(rs.short_factor.size()));
  // One divisor per rotated frequency (Transformers' config validation says the same).
  const int64_t half = cfg.rotary_dim() / 2;
  if (half > 0 && rs.long_factor.size() != static_cast<size_t>(half))
    return r.bad_value("long_factor", "needs rotary_dim / 2 = " + std::to_string(half) + " values (one per rotated "
                                      "frequency), got " + std::to_string(rs.long_factor.size()) + "; rope 'longrope'");
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> original, r.int_field("original_max_position_embeddings"));
  if (!original) { LOOM_ASSIGN_OR_RETURN(original, top.int_field("original_max_position_embeddings")); }
  if (!original) original = cfg.max_position_embeddings;
  if (*original <= 0)
    return r.bad_value("original_max_position_embeddings", "must be positive, got " + std::to_string(*original));
  rs.original_max_position_embeddings = *original;
  LOOM_ASSIGN_OR_RETURN(std::optional<double> factor, r.number_field("factor"));
  rs.factor = factor ? *factor : static_cast<double>(cfg.max_position_embeddings) / static_cast<double>(*original);
  if (!(rs.factor > 0)) return r.bad_value("factor", "must be positive, got " + std::to_string(rs.factor));
  LOOM_ASSIGN_OR_RETURN(std::optional<double> attention_factor, r.number_field("attention_factor"));
  if (attention_factor) {
    if (*attention_factor < 0) return r.bad_value("attention_factor", "must not be negative");
    rs.attention_factor = *attention_factor;
    rs.attention_factor_given = true;
  } else {
    rs.attention_factor = rs.factor <= 1.0 ? 1.0
                                           : std::sqrt(1.0 + std::log(rs.factor) /
                                                                 std::log(static_cast<double>(*original)));
  }
  return Status::Ok();
}

Status parse_rope(const json& j, const std::string& source, ModelConfig& cfg) {
  const JsonFields top(j, source);
  const json* rope = nullptr;
  const char* rope_key = nullptr;
  // Transformers: `rope_scaling or rope_parameters`, so an empty rope_scaling
  // falls through to rope_parameters.
  if (top.given("rope_scaling")) {
    if (!j.at("rope_scaling").is_object()) return top.wrong_type("rope_scaling", "an object");
    if (!j.at("rope_scaling").empty()) rope = &j.at("rope_scaling"), rope_key = "rope_scaling";
  }
  if (!rope && top.given("rope_parameters")) {
    if (!j.at("rope_parameters").is_object()) return top.wrong_type("rope_parameters", "an object");
    rope = &j.at("rope_parameters"), rope_key = "rope_parameters";
  }
  const json empty = json::object();
  const JsonFields r(rope ? *rope : empty, source + ": " + (rope_key ? rope_key : "rope_scaling"));

  LOOM_ASSIGN_OR_RETURN(std::optional<double> theta, r.number_field("rope_theta"));
  if (!theta) { LOOM_ASSIGN_OR_RETURN(theta, top.number_field("rope_theta")); }
  cfg.rope_theta = theta.value_or(10000.0);
  if (!(cfg.rope_theta > 0)) return (r.given("rope_theta") ? r : top).bad_value("rope_theta", "must be positive");

  LOOM_ASSIGN_OR_RETURN(std::optional<double> partial, r.number_field("partial_rotary_factor"));
  if (!partial) { LOOM_ASSIGN_OR_RETURN(partial, top.number_field("partial_rotary_factor")); }
  cfg.partial_rotary_factor = partial.value_or(1.0);
  if (!(cfg.partial_rotary_factor > 0 && cfg.partial_rotary_factor <= 1))
    return (r.given("partial_rotary_factor") ? r : top)
        .bad_value("partial_rotary_factor", "must be in (0, 1], got " + std::to_string(cfg.partial_rotary_factor));

  RopeScaling& rs = cfg.rope_scaling;
  if (!rope) return Status::Ok();

  LOOM_ASSIGN_OR_RETURN(std::optional<std::string> type, r.string_field("rope_type"));
  if (!type) { LOOM_ASSIGN_OR_RETURN(type, r.string_field("type")); }
  if (!type) {
    // Gemma-style per-layer-type dicts ({"full_attention": {...}, ...}).
    bool nested = !rope->empty();
    for (const auto& [k, v] : rope->items()) nested = nested && v.is_object();
    if (nested) return unsupported(r.where() + ": per-layer-type RoPE parameters are not supported");
  }
  rs.rope_type = type.value_or("default");
  const std::string& t = rs.rope_type;
  if (t != "default" && t != "linear" && t != "dynamic" && t != "llama3" && t != "yarn" && t != "longrope")
    return unsupported(r.where() + ": rope_type '" + t +
                       "' is not supported (loom supports default, linear, dynamic, llama3, yarn, longrope)");
  if (t == "default") return Status::Ok();
  if (t == "longrope") return parse_longrope(*rope, r, top, cfg);

  // `factor` is required by every scaled type; yarn alone may leave it null
  // (then max_position_embeddings / original_max_position_embeddings).
  if (!r.present("factor") || (t != "yarn" && r.is_null("factor")))
    return parse_error(r.where() + ": missing required field 'factor' for rope_type '" + t + "'");
  LOOM_ASSIGN_OR_RETURN(std::optional<double> factor, r.number_field("factor"));

  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> original, r.int_field("original_max_position_embeddings"));
  if (t == "llama3" || t == "yarn") {
    // A top-level original_max_position_embeddings takes priority (Phi-3 style).
    LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> top_original, top.int_field("original_max_position_embeddings"));
    if (top_original) original = top_original;
    if (!original) original = cfg.max_position_embeddings;
  }
  rs.original_max_position_embeddings = original.value_or(0);
  if (original && *original <= 0)
    return r.bad_value("original_max_position_embeddings", "must be positive, got " + std::to_string(*original));

  if (!factor) factor = static_cast<double>(cfg.max_position_embeddings) / static_cast<double>(*original);
  rs.factor = *factor;
  if (!(rs.factor > 0)) return r.bad_value("factor", "must be positive, got " + std::to_string(rs.factor));

  if (t == "llama3") {
    for (const char* key : {"low_freq_factor", "high_freq_factor"})
      if (!r.given(key)) return parse_error(r.where() + ": missing required field '" + key + "' for rope_type 'llama3'");
    LOOM_ASSIGN_OR_RETURN(std::optional<double> low, r.number_field("low_freq_factor"));
    LOOM_ASSIGN_OR_RETURN(std::optional<double> high, r.number_field("high_freq_factor"));
    rs.low_freq_factor = *low;
    rs.high_freq_factor = *high;
    if (!(rs.low_freq_factor > 0)) return r.bad_value("low_freq_factor", "must be positive");
    // The smoothing divides by (high - low).
    if (!(rs.high_freq_factor > rs.low_freq_factor))
      return r.bad_value("high_freq_factor", "must be greater than low_freq_factor");
  }

  if (t == "yarn") {
    LOOM_ASSIGN_OR_RETURN(std::optional<double> beta_fast, r.number_field("beta_fast"));
    LOOM_ASSIGN_OR_RETURN(std::optional<double> beta_slow, r.number_field("beta_slow"));
    LOOM_ASSIGN_OR_RETURN(std::optional<double> mscale, r.number_field("mscale"));
    LOOM_ASSIGN_OR_RETURN(std::optional<double> mscale_all_dim, r.number_field("mscale_all_dim"));
    LOOM_ASSIGN_OR_RETURN(std::optional<double> attention_factor, r.number_field("attention_factor"));
    LOOM_ASSIGN_OR_RETURN(std::optional<bool> truncate, r.bool_field("truncate"));
    // Python's `x or default`: 0 counts as absent.
    rs.beta_fast = beta_fast && *beta_fast != 0 ? *beta_fast : 32.0;
    rs.beta_slow = beta_slow && *beta_slow != 0 ? *beta_slow : 1.0;
    rs.mscale = mscale.value_or(0.0);
    rs.mscale_all_dim = mscale_all_dim.value_or(0.0);
    rs.truncate = truncate.value_or(true);
    if (attention_factor) {
      if (*attention_factor < 0) return r.bad_value("attention_factor", "must not be negative");
      rs.attention_factor = *attention_factor;
      rs.attention_factor_given = true;
    } else if (rs.mscale != 0 && rs.mscale_all_dim != 0) {
      rs.attention_factor = yarn_mscale(rs.factor, rs.mscale) / yarn_mscale(rs.factor, rs.mscale_all_dim);
    } else {
      rs.attention_factor = yarn_mscale(rs.factor, 1.0);
    }
  }
  return Status::Ok();
}

Status parse_window(const JsonFields& f, const TypeDefaults& d, ModelConfig& cfg) {
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> window, f.int_field("sliding_window"));
  // Qwen2/Qwen3/Mistral default to 4096 when the key is absent; null disables.
  if (!f.present("sliding_window") && (d.window == WindowRule::kQwen || d.window == WindowRule::kMistral))
    window = 4096;
  if (window && *window <= 0) return f.bad_value("sliding_window", "must be positive, got " + std::to_string(*window));
  LOOM_ASSIGN_OR_RETURN(std::optional<bool> use_window, f.bool_field("use_sliding_window"));
  cfg.use_sliding_window = use_window.value_or(false);
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> max_window_layers, f.int_field("max_window_layers"));
  cfg.max_window_layers = max_window_layers.value_or(d.window == WindowRule::kQwen ? 28 : 0);
  if (cfg.max_window_layers < 0) return f.bad_value("max_window_layers", "must not be negative");

  switch (d.window) {
    case WindowRule::kNone: cfg.sliding_window.reset(); break;
    case WindowRule::kQwen: cfg.sliding_window = cfg.use_sliding_window ? window : std::nullopt; break;
    case WindowRule::kMistral:
    case WindowRule::kGeneric: cfg.sliding_window = window; break;
  }

  const auto n = static_cast<size_t>(cfg.num_hidden_layers);
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> explicit_types, f.string_list("layer_types"));
  const bool honour_explicit = f.given("layer_types") && (d.window == WindowRule::kQwen || d.window == WindowRule::kGeneric);
  if (honour_explicit) {
    if (explicit_types.size() != n)
      return f.bad_value("layer_types", "has " + std::to_string(explicit_types.size()) + " entries but num_hidden_layers is " +
                                            std::to_string(n));
    if (d.window == WindowRule::kQwen)
      for (size_t i = 0; i < n; ++i)
        if (explicit_types[i] != "full_attention" && explicit_types[i] != "sliding_attention")
          return f.bad_value("layer_types", "entry " + std::to_string(i) + " is '" + explicit_types[i] +
                                                "' (expected full_attention or sliding_attention)");
    cfg.layer_types = std::move(explicit_types);
    return Status::Ok();
  }
  cfg.layer_types.assign(n, "full_attention");
  for (size_t i = 0; i < n; ++i) {
    const bool slide = cfg.sliding_window.has_value() &&
                       (d.window == WindowRule::kMistral ||
                        (d.window == WindowRule::kQwen && static_cast<int64_t>(i) >= cfg.max_window_layers));
    if (slide) cfg.layer_types[i] = "sliding_attention";
  }
  if (f.given("layer_types") && explicit_types != cfg.layer_types)
    log_warn(f.where() + ": layer_types is ignored for model_type '" + cfg.model_type +
             "' (as in Transformers); using the attention pattern its config class implies");
  return Status::Ok();
}

}  // namespace

std::optional<DType> ModelConfig::dtype() const {
  if (torch_dtype == "float32") return DType::kF32;
  if (torch_dtype == "bfloat16") return DType::kBF16;
  if (torch_dtype == "float16") return DType::kF16;
  return std::nullopt;
}

Result<ModelConfig> ModelConfig::from_file(const std::string& path) {
  std::error_code ec;
  const std::string file =
      std::filesystem::is_directory(path, ec) ? (std::filesystem::path(path) / "config.json").string() : path;
  LOOM_ASSIGN_OR_RETURN(json j, io::read_json_file(file));
  return from_json(j, file);
}

Result<ModelConfig> ModelConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) return parse_error(source + ": must be a JSON object, got " + io::describe_json(j));
  const JsonFields f(j, source);
  ModelConfig cfg;
  cfg.source = source;
  cfg.raw = j;

  LOOM_ASSIGN_OR_RETURN(std::optional<std::string> model_type, f.string_field("model_type"));
  if (!model_type) return f.missing("model_type");
  cfg.model_type = *model_type;
  const TypeDefaults d = defaults_for(cfg.model_type);
  LOOM_ASSIGN_OR_RETURN(cfg.architectures, f.string_list("architectures"));

  // Sizes: the type's default, or required when the type is unknown. Each has a
  // ceiling, so a hostile config cannot size an allocation (layer_types holds one
  // entry per layer) or overflow the int32 token ids and shape products downstream.
  struct SizeField {
    const char* key;
    int64_t* out;
    int64_t fallback;
    bool required_if_unknown;
    int64_t max = std::numeric_limits<int32_t>::max();
  };
  constexpr int64_t kMaxLayers = 1 << 16;  // the largest published models have a few hundred
  const SizeField sizes[] = {
      {"vocab_size", &cfg.vocab_size, d.vocab_size, true},
      {"hidden_size", &cfg.hidden_size, d.hidden_size, true},
      {"intermediate_size", &cfg.intermediate_size, d.intermediate_size, false},
      {"num_hidden_layers", &cfg.num_hidden_layers, d.num_hidden_layers, true, kMaxLayers},
      {"num_attention_heads", &cfg.num_attention_heads, d.num_attention_heads, true},
      {"max_position_embeddings", &cfg.max_position_embeddings, d.max_position_embeddings, false},
  };
  for (const SizeField& s : sizes) {
    LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> v, f.int_field(s.key));
    if (!v && !d.known && s.required_if_unknown) return f.missing(s.key);
    *s.out = v.value_or(s.fallback);
    const bool may_be_zero = !v && !d.known;  // intermediate_size of an unknown type
    if (*s.out <= 0 && !may_be_zero) return f.bad_value(s.key, "must be positive, got " + std::to_string(*s.out));
    if (*s.out > s.max)
      return f.bad_value(s.key, "must be at most " + std::to_string(s.max) + ", got " + std::to_string(*s.out));
  }

  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> kv, f.int_field("num_key_value_heads"));
  if (kv) cfg.num_key_value_heads = *kv;
  else if (f.is_null("num_key_value_heads") || !d.num_key_value_heads) cfg.num_key_value_heads = cfg.num_attention_heads;
  else cfg.num_key_value_heads = *d.num_key_value_heads;
  if (cfg.num_key_value_heads <= 0)
    return f.bad_value("num_key_value_heads", "must be positive, got " + std::to_string(cfg.num_key_value_heads));
  if (cfg.num_attention_heads % cfg.num_key_value_heads != 0)
    return f.bad_value("num_attention_heads", "(" + std::to_string(cfg.num_attention_heads) +
                                                  ") must be a multiple of num_key_value_heads (" +
                                                  std::to_string(cfg.num_key_value_heads) + ")");

  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, f.int_field("head_dim"));
  if (head_dim) {
    cfg.head_dim = *head_dim;
    if (cfg.head_dim <= 0 || cfg.head_dim > std::numeric_limits<int32_t>::max())
      return f.bad_value("head_dim", "must be in [1, 2147483647], got " + std::to_string(cfg.head_dim));
  } else if (d.head_dim) {
    cfg.head_dim = *d.head_dim;
  } else {
    if (cfg.hidden_size % cfg.num_attention_heads != 0)
      return f.bad_value("hidden_size", "(" + std::to_string(cfg.hidden_size) +
                                            ") is not divisible by num_attention_heads (" +
                                            std::to_string(cfg.num_attention_heads) + ") and head_dim is not given");
    cfg.head_dim = cfg.hidden_size / cfg.num_attention_heads;
  }

  LOOM_ASSIGN_OR_RETURN(std::optional<double> eps, f.number_field("rms_norm_eps"));
  cfg.rms_norm_eps = eps.value_or(1e-6);
  if (!(cfg.rms_norm_eps > 0)) return f.bad_value("rms_norm_eps", "must be positive");
  LOOM_ASSIGN_OR_RETURN(std::optional<std::string> act, f.string_field("hidden_act"));
  cfg.hidden_act = act.value_or("silu");

  LOOM_ASSIGN_OR_RETURN(std::optional<bool> tie, f.bool_field("tie_word_embeddings"));
  cfg.tie_word_embeddings = tie.value_or(d.tie_word_embeddings);
  LOOM_ASSIGN_OR_RETURN(std::optional<bool> attention_bias, f.bool_field("attention_bias"));
  cfg.attention_bias = attention_bias.value_or(false);
  LOOM_ASSIGN_OR_RETURN(std::optional<bool> mlp_bias, f.bool_field("mlp_bias"));
  cfg.mlp_bias = mlp_bias.value_or(false);

  LOOM_RETURN_IF_ERROR(parse_rope(j, source, cfg));
  LOOM_RETURN_IF_ERROR(parse_window(f, d, cfg));

  LOOM_ASSIGN_OR_RETURN(cfg.bos_token_id, f.int_field("bos_token_id"));
  if (!f.present("bos_token_id")) cfg.bos_token_id = d.bos_token_id;
  LOOM_ASSIGN_OR_RETURN(cfg.pad_token_id, f.int_field("pad_token_id"));
  LOOM_ASSIGN_OR_RETURN(cfg.eos_token_ids, f.int_or_int_list("eos_token_id"));
  if (!f.present("eos_token_id")) cfg.eos_token_ids = d.eos_token_ids;

  LOOM_ASSIGN_OR_RETURN(std::optional<std::string> torch_dtype, f.string_field("torch_dtype"));
  if (!torch_dtype) { LOOM_ASSIGN_OR_RETURN(torch_dtype, f.string_field("dtype")); }
  cfg.torch_dtype = torch_dtype.value_or("");
  return cfg;
}

}  // namespace loom
