// The tables behind gguf_mapping.h: one list of (GGUF name, parameter name) pairs
// per family, read forwards as weight rules for loading and backwards for writing.
// Key names follow llama.cpp's llama-arch (LLM_KV_*, LLM_TENSOR_*).
#include "loom/models/gguf_mapping.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>

#include "loom/weights/weight_pattern.h"

namespace loom::models {
namespace {

using io::GgufFile;
using io::GgufValue;

enum class RopeRows { kNone, kQueryHeads, kKeyHeads };

struct NamePair {
  const char* gguf;
  const char* hf;
  RopeRows rope = RopeRows::kNone;
};

// Every family loom maps stores its decoder under these names; what differs is
// which exist (biases: Qwen2; q/k norms: Qwen3) and whether q/k are interleaved.
const std::vector<NamePair>& decoder_names() {
  static const std::vector<NamePair> names = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
      {"blk.*.attn_norm.weight", "model.layers.*.input_layernorm.weight"},
      {"blk.*.attn_q.weight", "model.layers.*.self_attn.q_proj.weight", RopeRows::kQueryHeads},
      {"blk.*.attn_k.weight", "model.layers.*.self_attn.k_proj.weight", RopeRows::kKeyHeads},
      {"blk.*.attn_v.weight", "model.layers.*.self_attn.v_proj.weight"},
      {"blk.*.attn_output.weight", "model.layers.*.self_attn.o_proj.weight"},
      {"blk.*.attn_q.bias", "model.layers.*.self_attn.q_proj.bias", RopeRows::kQueryHeads},
      {"blk.*.attn_k.bias", "model.layers.*.self_attn.k_proj.bias", RopeRows::kKeyHeads},
      {"blk.*.attn_v.bias", "model.layers.*.self_attn.v_proj.bias"},
      {"blk.*.attn_output.bias", "model.layers.*.self_attn.o_proj.bias"},
      {"blk.*.attn_q_norm.weight", "model.layers.*.self_attn.q_norm.weight"},
      {"blk.*.attn_k_norm.weight", "model.layers.*.self_attn.k_norm.weight"},
      {"blk.*.ffn_norm.weight", "model.layers.*.post_attention_layernorm.weight"},
      {"blk.*.ffn_gate.weight", "model.layers.*.mlp.gate_proj.weight"},
      {"blk.*.ffn_up.weight", "model.layers.*.mlp.up_proj.weight"},
      {"blk.*.ffn_down.weight", "model.layers.*.mlp.down_proj.weight"},
      {"blk.*.ffn_gate.bias", "model.layers.*.mlp.gate_proj.bias"},
      {"blk.*.ffn_up.bias", "model.layers.*.mlp.up_proj.bias"},
      {"blk.*.ffn_down.bias", "model.layers.*.mlp.down_proj.bias"},
  };
  return names;
}

struct Family {
  const char* gguf_arch;
  const char* model_type;
  const char* class_name;
  bool interleaved_rope;  // llama.cpp permuted q/k rows (rope type NORM)
  bool fused_qkv_gate_up;  // Phi-3: attn_qkv and ffn_up (gate ‖ up) stay fused in GGUF
  bool experts;            // stacked experts: ffn_{gate,up,down}_exps, router ffn_gate_inp
  bool gemma_norms = false;  // Gemma: four norms a layer, stored as 1 + w (llama.cpp multiplies by them)
  bool gpt_oss = false;      // gpt-oss: sinks, biased router and experts, post_attention_norm (gpt_oss_names)
};

const std::vector<Family>& families() {
  static const std::vector<Family> f = {
      {"llama", "llama", "LlamaForCausalLM", true, false, false},
      {"qwen2", "qwen2", "Qwen2ForCausalLM", false, false, false},
      {"qwen3", "qwen3", "Qwen3ForCausalLM", false, false, false},
      {"phi3", "phi3", "Phi3ForCausalLM", false, true, false},
      {"gemma2", "gemma2", "Gemma2ForCausalLM", false, false, false, true},
      {"gemma3", "gemma3_text", "Gemma3ForCausalLM", false, false, false, true},
      {"qwen2moe", "qwen2_moe", "Qwen2MoeForCausalLM", false, false, true},
      {"qwen3moe", "qwen3_moe", "Qwen3MoeForCausalLM", false, false, true},
      {"gpt-oss", "gpt_oss", "GptOssForCausalLM", false, false, true, false, true},
      // Mixtral is stored as llama with experts; listed after llama so reading picks llama first.
      {"llama", "mixtral", "MixtralForCausalLM", true, false, true},
  };
  return f;
}

// Names only MoE families have: the router, the stacked experts (gate and up are
// concatenated into loom's gate_up_proj), Qwen2-MoE's shared expert and its gate
// (Qwen3-MoE has none, so they never match its parameters).
const std::vector<NamePair>& expert_names() {
  static const std::vector<NamePair> names = {
      {"blk.*.ffn_gate_inp.weight", "model.layers.*.mlp.gate.weight"},
      {"blk.*.ffn_down_exps.weight", "model.layers.*.mlp.experts.down_proj"},
      {"blk.*.ffn_gate_shexp.weight", "model.layers.*.mlp.shared_expert.gate_proj.weight"},
      {"blk.*.ffn_up_shexp.weight", "model.layers.*.mlp.shared_expert.up_proj.weight"},
      {"blk.*.ffn_down_shexp.weight", "model.layers.*.mlp.shared_expert.down_proj.weight"},
      {"blk.*.ffn_gate_inp_shexp.weight", "model.layers.*.mlp.shared_expert_gate.weight"},
  };
  return names;
}

// Gemma2's norms around attention and the MLP, where the decoder's ffn_norm is
// post_attention_layernorm for every other family.
const std::vector<NamePair>& gemma_norm_names() {
  static const std::vector<NamePair> names = {
      {"blk.*.post_attention_norm.weight", "model.layers.*.post_attention_layernorm.weight"},
      {"blk.*.ffn_norm.weight", "model.layers.*.pre_feedforward_layernorm.weight"},
      {"blk.*.post_ffw_norm.weight", "model.layers.*.post_feedforward_layernorm.weight"},
  };
  return names;
}

// llama.cpp's gpt-oss (LLM_ARCH_OPENAI_MOE): the MLP's norm is post_attention_norm,
// the router is mlp.router (with a bias), the experts carry biases ([E, I] for
// gate and up, which loom stacks as gate_up_proj_bias [E, 2I]; [E, H] for down),
// and each layer has its sinks.
const std::vector<NamePair>& gpt_oss_names() {
  static const std::vector<NamePair> names = {
      {"blk.*.post_attention_norm.weight", "model.layers.*.post_attention_layernorm.weight"},
      {"blk.*.attn_sinks.weight", "model.layers.*.self_attn.sinks"},
      {"blk.*.ffn_gate_inp.weight", "model.layers.*.mlp.router.weight"},
      {"blk.*.ffn_gate_inp.bias", "model.layers.*.mlp.router.bias"},
      {"blk.*.ffn_down_exps.weight", "model.layers.*.mlp.experts.down_proj"},
      {"blk.*.ffn_down_exps.bias", "model.layers.*.mlp.experts.down_proj_bias"},
  };
  return names;
}

bool is_norm_weight(const std::string& gguf_name) {
  const std::string tail = "norm.weight";
  return gguf_name.size() >= tail.size() && gguf_name.compare(gguf_name.size() - tail.size(), tail.size(), tail) == 0;
}

// llama.cpp picks Gemma2's attention scale from the layer count (the 27B model,
// 46 layers, scales by hidden / heads); Transformers reads query_pre_attn_scalar.
int64_t gemma2_llama_cpp_query_scalar(int64_t layers, int64_t hidden, int64_t heads, int64_t head_dim) {
  return layers == 46 ? hidden / heads : head_dim;
}
constexpr const char* kGemma2QueryScalarKey = "loom.gemma2.query_pre_attn_scalar";
// YaRN with Transformers' truncate false (gpt-oss): llama.cpp ignores the key and
// rounds the correction range outwards; loom reads the checkpoint's choice back.
constexpr const char* kYarnTruncateKey = "loom.rope.scaling.yarn_truncate";

// llama.cpp's gemma3 (llama-model.cpp): with a window, set_swa_pattern(6) — every
// sixth layer full — and the sliding layers' RoPE base fixed at 10k, unscaled;
// the attention scale from head_dim, or hidden / heads for the 27B model (62
// layers), where Transformers reads query_pre_attn_scalar.
constexpr int64_t kGemma3LlamaCppPattern = 6;
constexpr double kGemma3LlamaCppLocalBase = 10000.0;
int64_t gemma3_llama_cpp_query_scalar(int64_t layers, int64_t hidden, int64_t heads, int64_t head_dim) {
  return layers == 62 ? hidden / heads : head_dim;
}
constexpr const char* kGemma3QueryScalarKey = "loom.gemma3.query_pre_attn_scalar";

const Family* family_by_arch(const std::string& arch) {
  for (const auto& f : families())
    if (arch == f.gguf_arch) return &f;
  return nullptr;
}

const Family* family_by_type(const std::string& model_type) {
  for (const auto& f : families())
    if (model_type == f.model_type) return &f;
  // Mistral is a Llama without biases; llama.cpp stores it as llama.
  if (model_type == "mistral") return &families()[0];
  // Gemma3ForConditionalGeneration's language model is a gemma3 text model.
  if (model_type == "gemma3") return family_by_type("gemma3_text");
  return nullptr;
}

std::string supported_list() {
  std::string s;
  for (const auto& f : families())
    if (s.find(f.gguf_arch) == std::string::npos) s += (s.empty() ? "" : ", ") + std::string(f.gguf_arch);
  return s;
}

// The family's plain renamings: the decoder's, minus what a fused or expert
// family stores differently, plus the expert names.
std::vector<NamePair> plain_names(const Family& f) {
  std::vector<NamePair> out;
  for (const NamePair& n : decoder_names()) {
    const std::string g = n.gguf;
    if (f.fused_qkv_gate_up && (g == "blk.*.attn_q.weight" || g == "blk.*.attn_k.weight" || g == "blk.*.attn_v.weight" ||
                                g == "blk.*.ffn_gate.weight" || g == "blk.*.ffn_up.weight"))
      continue;
    if ((f.gemma_norms || f.gpt_oss) && g == "blk.*.ffn_norm.weight") continue;
    out.push_back(n);
  }
  if (f.gpt_oss) {
    for (const NamePair& n : gpt_oss_names()) out.push_back(n);
    return out;
  }
  if (f.gemma_norms)
    for (const NamePair& n : gemma_norm_names()) out.push_back(n);
  if (f.experts)
    for (const NamePair& n : expert_names()) out.push_back(n);
  return out;
}

// The layer number when `name` is all of `pattern` (one `*`, weights' pattern syntax).
std::optional<std::string> match_layer(const std::string& pattern, const std::string& name) {
  Result<WeightPattern> p = WeightPattern::parse(pattern);
  if (!p.ok()) return std::nullopt;
  std::optional<std::vector<std::string>> caps = p->match(name);
  if (!caps) return std::nullopt;
  return caps->empty() ? std::string() : caps->front();
}

// `pattern` with its `*` replaced by `layer`.
std::string with_layer(const std::string& pattern, const std::string& layer) {
  Result<WeightPattern> p = WeightPattern::parse(pattern);
  return p.ok() ? p->substitute({layer}) : pattern;
}

int64_t rope_heads_of(RopeRows r, const ModelConfig& c) {
  switch (r) {
    case RopeRows::kQueryHeads: return c.num_attention_heads;
    case RopeRows::kKeyHeads: return c.num_key_value_heads;
    case RopeRows::kNone: break;
  }
  return 0;
}

// Llama 3's rope divisors as Transformers computes them (_compute_llama3_parameters),
// in double: 1 for short wavelengths, `factor` for long ones, smoothed between.
std::vector<double> llama3_divisors(double theta, int64_t rot, double factor, double low, double high, double orig) {
  std::vector<double> f(static_cast<size_t>(rot / 2));
  for (int64_t i = 0; i < rot / 2; ++i) {
    const double inv = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(rot));
    const double wavelen = 2 * M_PI / inv;
    if (wavelen < orig / high) f[static_cast<size_t>(i)] = 1.0;
    else if (wavelen > orig / low) f[static_cast<size_t>(i)] = factor;
    else {
      const double smooth = (orig / wavelen - low) / (high - low);
      f[static_cast<size_t>(i)] = 1.0 / ((1 - smooth) / factor + smooth);
    }
  }
  return f;
}

constexpr const char* kLlama3Keys[] = {"loom.rope.llama3.factor", "loom.rope.llama3.low_freq_factor",
                                       "loom.rope.llama3.high_freq_factor",
                                       "loom.rope.llama3.original_context_length"};

// llama.cpp keeps Llama 3's rope scaling only as the divisors in rope_freqs.weight.
// loom's own files also carry the four parameters (loom.rope.llama3.*); for others
// they are recovered from the divisors: between the two cut-offs the smoothing is
// linear in 1/wavelength, and only that line's slope and intercept matter, so
// original_max_position_embeddings is fixed at 8192 and the factors follow. Either
// way the parameters must reproduce every stored divisor.
Result<nlohmann::json> llama3_scaling_from_gguf(const GgufFile& file, const std::string& p, double theta, int64_t rot) {
  LOOM_ASSIGN_OR_RETURN(Tensor t, file.get("rope_freqs.weight"));
  if (t.dtype() != DType::kF32 || t.numel() != rot / 2)
    return parse_error(file.path() + ": rope_freqs.weight is " + t.describe() + ", expected F32[" +
                       std::to_string(rot / 2) + "]");
  const float* stored = t.data_as<float>();
  double factor = 0, low = 0, high = 0, orig = 0;
  if (file.find_value(kLlama3Keys[0])) {
    double* out[] = {&factor, &low, &high, &orig};
    for (int i = 0; i < 4; ++i) {
      LOOM_ASSIGN_OR_RETURN(const GgufValue* v, file.require_value(kLlama3Keys[i]));
      LOOM_ASSIGN_OR_RETURN(*out[i], v->as_double(kLlama3Keys[i]));
    }
  } else {
    for (int64_t i = 0; i < rot / 2; ++i) factor = std::max(factor, static_cast<double>(stored[i]));
    if (!(factor > 1)) return parse_error(file.path() + ": rope_freqs.weight has no divisor above 1");
    // Points strictly between the cut-offs: s = (1/f − 1/factor) / (1 − 1/factor) = A·x + B, x = 1/wavelen.
    std::vector<std::pair<double, double>> mid;
    double x_long = 0, x_short = 1e300;  // nearest x on each side of the smoothed band
    for (int64_t i = 0; i < rot / 2; ++i) {
      const double x = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(rot)) / (2 * M_PI);
      const double f = stored[i];
      if (std::fabs(f - factor) <= 1e-6 * factor) x_long = std::max(x_long, x);
      else if (std::fabs(f - 1.0) <= 1e-6) x_short = std::min(x_short, x);
      else mid.emplace_back(x, (1.0 / f - 1.0 / factor) / (1.0 - 1.0 / factor));
    }
    // Candidate lines s = A·x + B; the first whose parameters reproduce every divisor wins.
    std::vector<std::pair<double, double>> lines;
    if (mid.size() >= 2) {
      double sx = 0, sy = 0, sxx = 0, sxy = 0;
      for (auto [x, y] : mid) { sx += x; sy += y; sxx += x * x; sxy += x * y; }
      const double n = static_cast<double>(mid.size());
      const double A = (n * sxy - sx * sy) / (n * sxx - sx * sx);
      lines.emplace_back(A, (sy - A * sx) / n);
    } else if (mid.size() == 1) {
      // Through the one smoothed point, reaching 0 or 1 halfway to a neighbour.
      const auto [xm, sm] = mid[0];
      if (x_long > 0) {
        const double x0 = (x_long + xm) / 2;
        lines.emplace_back(sm / (xm - x0), -sm / (xm - x0) * x0);
      }
      if (x_short < 1e300) {
        const double x1 = (xm + x_short) / 2;
        const double A = (1 - sm) / (x1 - xm);
        lines.emplace_back(A, sm - A * xm);
      }
    } else if (x_short < 1e300 && x_long > 0) {
      // No band: s = 0 and s = 1 inside the gap between the two sides.
      const double x0 = x_long + (x_short - x_long) / 3, x1 = x_long + 2 * (x_short - x_long) / 3;
      lines.emplace_back(1.0 / (x1 - x0), -x0 / (x1 - x0));
    }
    orig = 8192;
    bool found = false;
    for (auto [A, B] : lines) {
      if (!(A > 0) || !(B < 0)) continue;
      low = -B * orig / A;
      high = low + orig / A;
      const std::vector<double> f = llama3_divisors(theta, rot, factor, low, high, orig);
      bool ok = true;
      for (int64_t i = 0; i < rot / 2 && ok; ++i)
        ok = std::fabs(f[static_cast<size_t>(i)] - stored[i]) <= 1e-4 * std::fabs(stored[i]);
      if (ok) { found = true; break; }
    }
    if (!found)
      return unsupported(file.path() + ": rope_freqs.weight is not Llama 3's rope scaling (no fit of its divisors)");
  }
  const std::vector<double> want = llama3_divisors(theta, rot, factor, low, high, orig);
  for (int64_t i = 0; i < rot / 2; ++i)
    if (std::fabs(want[static_cast<size_t>(i)] - stored[i]) > 1e-4 * std::fabs(stored[i]))
      return unsupported(file.path() + ": rope_freqs.weight[" + std::to_string(i) + "] = " + std::to_string(stored[i]) +
                         " does not follow Llama 3's rope scaling (expected " +
                         std::to_string(want[static_cast<size_t>(i)]) + ")");
  return nlohmann::json{{"rope_type", "llama3"},
                        {"factor", factor},
                        {"low_freq_factor", low},
                        {"high_freq_factor", high},
                        {"original_max_position_embeddings", static_cast<int64_t>(std::llround(orig))}};
}

// Phi-3 128k / 3.5: llama.cpp stores longrope's factors as rope_factors_long/short
// and the pre-extension length as rope.scaling.original_context_length; the
// attention factor it computed (rope.scaling.attn_factor) is kept as given.
Result<nlohmann::json> longrope_scaling_from_gguf(const GgufFile& file, const std::string& p) {
  nlohmann::json rs{{"rope_type", "longrope"}};
  size_t n = 0;
  for (const char* which : {"long", "short"}) {
    const std::string name = std::string("rope_factors_") + which + ".weight";
    if (!file.find(name)) return parse_error(file.path() + ": has one of rope_factors_long/short but not " + name);
    LOOM_ASSIGN_OR_RETURN(Tensor t, file.get(name));
    if (t.dtype() != DType::kF32 || t.rank() != 1)
      return parse_error(file.path() + ": " + name + " is " + t.describe() + ", expected a F32 vector");
    if (n && static_cast<size_t>(t.numel()) != n)
      return parse_error(file.path() + ": rope_factors_long and rope_factors_short differ in length");
    n = static_cast<size_t>(t.numel());
    const float* v = t.data_as<float>();
    rs[std::string(which) + "_factor"] = std::vector<double>(v, v + n);
  }
  LOOM_ASSIGN_OR_RETURN(const GgufValue* ctx, file.require_value(p + "context_length"));
  LOOM_ASSIGN_OR_RETURN(int64_t context, ctx->as_int(p + "context_length"));
  int64_t original = context;
  if (const GgufValue* o = file.find_value(p + "rope.scaling.original_context_length")) {
    LOOM_ASSIGN_OR_RETURN(original, o->as_int(p + "rope.scaling.original_context_length"));
  }
  rs["original_max_position_embeddings"] = original;
  if (const GgufValue* a = file.find_value(p + "rope.scaling.attn_factor")) {
    LOOM_ASSIGN_OR_RETURN(double attn, a->as_double(p + "rope.scaling.attn_factor"));
    rs["attention_factor"] = attn;
  }
  return rs;
}

}  // namespace

Result<std::vector<std::pair<std::string, Tensor>>> gguf_extra_tensors_for(const ModelConfig& c) {
  std::vector<std::pair<std::string, Tensor>> out;
  const RopeScaling& rs = c.rope_scaling;
  if (rs.rope_type == "longrope") {  // llama.cpp's Phi-3: the factors as two F32 tensors
    const std::vector<float> lf(rs.long_factor.begin(), rs.long_factor.end());
    const std::vector<float> sf(rs.short_factor.begin(), rs.short_factor.end());
    out.emplace_back("rope_factors_long.weight", Tensor::from_f32(lf, {static_cast<int64_t>(lf.size())}));
    out.emplace_back("rope_factors_short.weight", Tensor::from_f32(sf, {static_cast<int64_t>(sf.size())}));
    return out;
  }
  if (rs.rope_type != "llama3") return out;
  const int64_t rot = c.rotary_dim();
  const double orig = static_cast<double>(rs.original_max_position_embeddings > 0 ? rs.original_max_position_embeddings
                                                                                   : c.max_position_embeddings);
  const std::vector<double> f = llama3_divisors(c.rope_theta, rot, rs.factor, rs.low_freq_factor, rs.high_freq_factor, orig);
  std::vector<float> ff(f.begin(), f.end());
  out.emplace_back("rope_freqs.weight", Tensor::from_f32(ff, {rot / 2}));
  return out;
}

bool gguf_tensor_is_not_a_parameter(const std::string& gguf_name) {
  return gguf_name == "rope_freqs.weight" || gguf_name == "rope_factors_long.weight" ||
         gguf_name == "rope_factors_short.weight";
}

const std::vector<std::string>& gguf_architectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& f : families()) v.emplace_back(f.gguf_arch);
    return v;
  }();
  return names;
}

Result<nlohmann::json> config_json_from_gguf(const GgufFile& file) {
  LOOM_ASSIGN_OR_RETURN(std::string arch, file.architecture());
  const Family* fam = family_by_arch(arch);
  const bool has_experts = file.find("blk.0.ffn_gate_exps.weight") != nullptr;
  if (fam && arch == "llama" && has_experts) fam = family_by_type("mixtral");
  if (!fam)
    return unsupported(file.path() + ": general.architecture '" + arch + "' is not one loom maps (supported: " +
                       supported_list() + ")");
  const std::string p = arch + ".";
  auto need_int = [&](const std::string& key) -> Result<int64_t> {
    LOOM_ASSIGN_OR_RETURN(const GgufValue* v, file.require_value(key));
    return v->as_int(key);
  };
  auto opt_number = [&](const std::string& key, double fallback) -> Result<double> {
    const GgufValue* v = file.find_value(key);
    if (!v) return fallback;
    return v->as_double(key);
  };
  nlohmann::json c;
  c["model_type"] = fam->model_type;
  c["architectures"] = {fam->class_name};
  LOOM_ASSIGN_OR_RETURN(int64_t hidden, need_int(p + "embedding_length"));
  LOOM_ASSIGN_OR_RETURN(int64_t layers, need_int(p + "block_count"));
  LOOM_ASSIGN_OR_RETURN(int64_t ffn, need_int(p + "feed_forward_length"));
  LOOM_ASSIGN_OR_RETURN(int64_t heads, need_int(p + "attention.head_count"));
  int64_t kv_heads = heads;
  if (file.find_value(p + "attention.head_count_kv")) {
    LOOM_ASSIGN_OR_RETURN(kv_heads, need_int(p + "attention.head_count_kv"));
  }
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0)
    return parse_error(file.path() + ": " + p + "attention.head_count " + std::to_string(heads) +
                       " is not a multiple of head_count_kv " + std::to_string(kv_heads));
  int64_t head_dim = hidden / heads;
  if (file.find_value(p + "attention.key_length")) {
    LOOM_ASSIGN_OR_RETURN(head_dim, need_int(p + "attention.key_length"));
  }
  LOOM_ASSIGN_OR_RETURN(int64_t context, need_int(p + "context_length"));
  LOOM_ASSIGN_OR_RETURN(double eps, opt_number(p + "attention.layer_norm_rms_epsilon", 1e-6));
  LOOM_ASSIGN_OR_RETURN(double theta, opt_number(p + "rope.freq_base", 10000.0));
  // The vocabulary: the embedding's rows are what the model can take.
  const io::GgufTensorInfo* embd = file.find("token_embd.weight");
  if (!embd) return not_found(file.path() + ": no tensor 'token_embd.weight'");
  const int64_t vocab = embd->shape.at(0);
  c["hidden_size"] = hidden;
  c["num_hidden_layers"] = layers;
  c["intermediate_size"] = ffn;
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = kv_heads;
  c["head_dim"] = head_dim;
  c["max_position_embeddings"] = context;
  c["rms_norm_eps"] = eps;
  c["rope_theta"] = theta;
  c["vocab_size"] = vocab;
  c["hidden_act"] = "silu";
  c["tie_word_embeddings"] = file.find("output.weight") == nullptr;
  c["attention_bias"] = file.find("blk.0.attn_q.bias") != nullptr;
  c["mlp_bias"] = file.find("blk.0.ffn_up.bias") != nullptr;
  if (const GgufValue* v = file.find_value("tokenizer.ggml.bos_token_id")) {
    LOOM_ASSIGN_OR_RETURN(int64_t id, v->as_int("tokenizer.ggml.bos_token_id"));
    c["bos_token_id"] = id;
  }
  // End-of-generation tokens: EOS, and llama.cpp's end-of-turn / end-of-message
  // tokens, which Transformers lists in generation_config's eos_token_id.
  nlohmann::json eos = nlohmann::json::array();
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (const GgufValue* v = file.find_value(key)) {
      LOOM_ASSIGN_OR_RETURN(int64_t id, v->as_int(key));
      if (std::find(eos.begin(), eos.end(), nlohmann::json(id)) == eos.end()) eos.push_back(id);
    }
  }
  if (eos.size() == 1) c["eos_token_id"] = eos[0];
  else if (!eos.empty()) c["eos_token_id"] = eos;
  if (const GgufValue* v = file.find_value(p + "rope.dimension_count")) {
    LOOM_ASSIGN_OR_RETURN(int64_t rot, v->as_int(p + "rope.dimension_count"));
    if (rot != head_dim) c["partial_rotary_factor"] = static_cast<double>(rot) / static_cast<double>(head_dim);
  }
  // Rope scaling as llama.cpp stores it (linear and yarn keep their parameters;
  // Llama 3's frequency factors live in a rope_freqs tensor, read by the caller).
  if (const GgufValue* v = file.find_value(p + "rope.scaling.type")) {
    LOOM_ASSIGN_OR_RETURN(std::string type, v->as_string(p + "rope.scaling.type"));
    if (type == "linear" || type == "yarn") {
      nlohmann::json rs;
      rs["rope_type"] = type;
      LOOM_ASSIGN_OR_RETURN(double factor, opt_number(p + "rope.scaling.factor", 1.0));
      rs["factor"] = factor;
      if (const GgufValue* o = file.find_value(p + "rope.scaling.original_context_length")) {
        LOOM_ASSIGN_OR_RETURN(int64_t orig, o->as_int(p + "rope.scaling.original_context_length"));
        rs["original_max_position_embeddings"] = orig;
      }
      // ggml's YaRN always rounds its correction range outwards (Transformers'
      // truncate true, ModelConfig's default); loom writes the exception.
      if (const GgufValue* t = file.find_value(kYarnTruncateKey)) {
        LOOM_ASSIGN_OR_RETURN(bool truncate, t->as_bool(kYarnTruncateKey));
        rs["truncate"] = truncate;
      }
      c["rope_scaling"] = rs;
    } else if (type != "none") {
      return unsupported(file.path() + ": " + p + "rope.scaling.type '" + type + "' (loom maps none, linear, yarn)");
    }
  }
  if (fam->experts) {
    LOOM_ASSIGN_OR_RETURN(int64_t experts, need_int(p + "expert_count"));
    LOOM_ASSIGN_OR_RETURN(int64_t used, need_int(p + "expert_used_count"));
    c[std::string(fam->model_type) == "mixtral" ? "num_local_experts" : "num_experts"] = experts;
    c["num_experts_per_tok"] = used;
    if (std::string(fam->model_type) == "qwen2_moe") {
      LOOM_ASSIGN_OR_RETURN(int64_t moe_ffn, need_int(p + "expert_feed_forward_length"));
      c["moe_intermediate_size"] = moe_ffn;
      int64_t shared = 0;
      if (file.find_value(p + "expert_shared_feed_forward_length")) {
        LOOM_ASSIGN_OR_RETURN(shared, need_int(p + "expert_shared_feed_forward_length"));
      }
      c["shared_expert_intermediate_size"] = shared;
      c["decoder_sparse_step"] = 1;
      bool norm = false;
      if (const GgufValue* v = file.find_value(p + "expert_weights_norm")) {
        LOOM_ASSIGN_OR_RETURN(norm, v->as_bool(p + "expert_weights_norm"));
      }
      c["norm_topk_prob"] = norm;
      // Layers without stacked experts run a dense MLP.
      nlohmann::json dense = nlohmann::json::array();
      for (int64_t i = 0; i < layers; ++i)
        if (!file.find("blk." + std::to_string(i) + ".ffn_gate_exps.weight")) dense.push_back(i);
      c["mlp_only_layers"] = dense;
    }
    if (std::string(fam->model_type) == "qwen3_moe") {
      // llama.cpp's qwen3moe: n_ff / n_expert_used when the expert width is not stored,
      // every layer sparse, and the top-k weights always renormalised.
      int64_t moe_ffn = used > 0 ? ffn / used : 0;
      if (file.find_value(p + "expert_feed_forward_length")) {
        LOOM_ASSIGN_OR_RETURN(moe_ffn, need_int(p + "expert_feed_forward_length"));
      }
      c["moe_intermediate_size"] = moe_ffn;
      c["norm_topk_prob"] = true;
      c["decoder_sparse_step"] = 1;
      c["mlp_only_layers"] = nlohmann::json::array();
      for (int64_t i = 0; i < layers; ++i)
        if (!file.find("blk." + std::to_string(i) + ".ffn_gate_exps.weight"))
          return parse_error(file.path() + ": qwen3moe layer " + std::to_string(i) +
                             " has no blk." + std::to_string(i) + ".ffn_gate_exps.weight (every qwen3moe layer is sparse)");
    }
  }
  if (fam->gpt_oss) {
    // llama.cpp's gpt-oss: every layer sparse, experts of expert_feed_forward_length,
    // even layers sliding, biases on q/k/v/o, SwiGLU limit 7 (its constant).
    c.erase("num_experts");
    LOOM_ASSIGN_OR_RETURN(int64_t experts, need_int(p + "expert_count"));
    c["num_local_experts"] = experts;
    int64_t moe_ffn = ffn;
    if (file.find_value(p + "expert_feed_forward_length")) {
      LOOM_ASSIGN_OR_RETURN(moe_ffn, need_int(p + "expert_feed_forward_length"));
    }
    c["intermediate_size"] = moe_ffn;
    c["swiglu_limit"] = 7.0;
    LOOM_ASSIGN_OR_RETURN(double window, opt_number(p + "attention.sliding_window", 128));
    c["sliding_window"] = static_cast<int64_t>(window);
    nlohmann::json types = nlohmann::json::array();  // llama.cpp's swa pattern 2: even layers slide
    for (int64_t i = 0; i < layers; ++i) types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    c["layer_types"] = types;
    c["attention_bias"] = true;
    // Without rope.scaling.* a gpt-oss GGUF runs unscaled, as in llama.cpp (not
    // GptOssConfig's default YaRN).
    if (!c.contains("rope_scaling")) c["rope_scaling"] = {{"rope_type", "default"}};
    for (int64_t i = 0; i < layers; ++i)
      if (!file.find("blk." + std::to_string(i) + ".ffn_gate_exps.weight"))
        return parse_error(file.path() + ": gpt-oss layer " + std::to_string(i) + " has no blk." + std::to_string(i) +
                           ".ffn_gate_exps.weight (every gpt-oss layer is sparse)");
  }
  if (std::string(fam->model_type) == "phi3") {
    c["original_max_position_embeddings"] = context;
    if (file.find("rope_factors_long.weight") || file.find("rope_factors_short.weight")) {
      LOOM_ASSIGN_OR_RETURN(nlohmann::json rs, longrope_scaling_from_gguf(file, p));
      c["original_max_position_embeddings"] = rs["original_max_position_embeddings"];
      rs.erase("original_max_position_embeddings");  // Phi-3 keeps it at the top level
      c["rope_scaling"] = rs;
    }
    if (const GgufValue* v = file.find_value(p + "attention.sliding_window")) {
      LOOM_ASSIGN_OR_RETURN(int64_t w, v->as_int(p + "attention.sliding_window"));
      if (w > 0) c["sliding_window"] = w;
    }
  }
  if (fam->gemma_norms && arch == "gemma3") {
    c.erase("hidden_act");
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c["attn_logit_softcapping"] = nullptr;
    c["final_logit_softcapping"] = nullptr;
    if (file.find_value(p + "final_logit_softcapping")) {
      LOOM_ASSIGN_OR_RETURN(double cap, opt_number(p + "final_logit_softcapping", 0.0));
      if (cap > 0) c["final_logit_softcapping"] = cap;
    }
    LOOM_ASSIGN_OR_RETURN(double window, opt_number(p + "attention.sliding_window", 0.0));
    LOOM_ASSIGN_OR_RETURN(double local_base, opt_number(p + "rope.freq_base_swa", kGemma3LlamaCppLocalBase));
    c["rope_local_base_freq"] = local_base;
    nlohmann::json types = nlohmann::json::array();
    for (int64_t i = 0; i < layers; ++i)
      types.push_back(window > 0 && (i + 1) % kGemma3LlamaCppPattern != 0 ? "sliding_attention" : "full_attention");
    c["layer_types"] = types;
    c["sliding_window"] = window > 0 ? nlohmann::json(static_cast<int64_t>(window)) : nlohmann::json(nullptr);
    LOOM_ASSIGN_OR_RETURN(double scalar, opt_number(kGemma3QueryScalarKey, static_cast<double>(gemma3_llama_cpp_query_scalar(
                                                                                layers, hidden, heads, head_dim))));
    c["query_pre_attn_scalar"] = scalar;
  } else if (fam->gemma_norms) {
    c.erase("hidden_act");
    c["hidden_activation"] = "gelu_pytorch_tanh";
    LOOM_ASSIGN_OR_RETURN(double attn_cap, opt_number(p + "attn_logit_softcapping", 50.0));
    LOOM_ASSIGN_OR_RETURN(double final_cap, opt_number(p + "final_logit_softcapping", 30.0));
    c["attn_logit_softcapping"] = attn_cap;
    c["final_logit_softcapping"] = final_cap;
    LOOM_ASSIGN_OR_RETURN(double window, opt_number(p + "attention.sliding_window", 4096));
    c["sliding_window"] = static_cast<int64_t>(window);
    nlohmann::json types = nlohmann::json::array();  // llama.cpp's pattern: even layers slide
    for (int64_t i = 0; i < layers; ++i) types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    c["layer_types"] = types;
    LOOM_ASSIGN_OR_RETURN(double scalar, opt_number(kGemma2QueryScalarKey, static_cast<double>(gemma2_llama_cpp_query_scalar(
                                                                                layers, hidden, heads, head_dim))));
    c["query_pre_attn_scalar"] = scalar;
  }
  if (file.find("rope_freqs.weight")) {
    const int64_t rot = c.contains("partial_rotary_factor")
                            ? static_cast<int64_t>(head_dim * c["partial_rotary_factor"].get<double>())
                            : head_dim;
    LOOM_ASSIGN_OR_RETURN(nlohmann::json rs, llama3_scaling_from_gguf(file, p, theta, rot));
    c["rope_scaling"] = rs;
  }
  return c;
}

Result<WeightRules> gguf_weight_rules(const ModelConfig& config) {
  const Family* fam = family_by_type(config.model_type);
  if (!fam) return unsupported("GGUF: model_type '" + config.model_type + "' has no GGUF mapping");
  WeightRules rules;
  if (fam->fused_qkv_gate_up) {
    // Chunk sizes come from the targets' shapes (q is larger than k and v under GQA).
    rules.push_back(WeightConverter{{"blk.*.attn_qkv.weight"},
                                    {"model.layers.*.self_attn.q_proj.weight", "model.layers.*.self_attn.k_proj.weight",
                                     "model.layers.*.self_attn.v_proj.weight"},
                                    {Chunk(0)}, false, "GGUF blk.*.attn_qkv.weight (fused q, k, v)"});
    rules.push_back(WeightConverter{{"blk.*.ffn_up.weight"},
                                    {"model.layers.*.mlp.gate_proj.weight", "model.layers.*.mlp.up_proj.weight"},
                                    {Chunk(0)}, false, "GGUF blk.*.ffn_up.weight (fused gate, up)"});
  }
  if (fam->experts)
    rules.push_back(WeightConverter{{"blk.*.ffn_gate_exps.weight", "blk.*.ffn_up_exps.weight"},
                                    {"model.layers.*.mlp.experts.gate_up_proj"},
                                    {Concatenate(1)}, true, "GGUF blk.*.ffn_{gate,up}_exps (stacked experts)"});
  if (fam->gpt_oss)
    rules.push_back(WeightConverter{{"blk.*.ffn_gate_exps.bias", "blk.*.ffn_up_exps.bias"},
                                    {"model.layers.*.mlp.experts.gate_up_proj_bias"},
                                    {Concatenate(1)}, false, "GGUF blk.*.ffn_{gate,up}_exps.bias (expert biases)"});
  for (const NamePair& n : plain_names(*fam)) {
    const int64_t heads = fam->interleaved_rope ? rope_heads_of(n.rope, config) : 0;
    if (heads > 0) {
      rules.push_back(WeightConverter{{n.gguf}, {n.hf}, {PermuteForRope(heads, config.head_dim)}, true,
                                      std::string("GGUF ") + n.gguf + " (interleaved rotary rows)"});
    } else if (fam->gemma_norms && is_norm_weight(n.gguf)) {
      rules.push_back(WeightConverter{{n.gguf}, {n.hf}, {AddScalar(-1.0)}, true,
                                      std::string("GGUF ") + n.gguf + " (stored as 1 + w)"});
    } else {
      // Anchored: a renaming replaces any matching run, and "output.weight" is
      // also the tail of "blk.0.attn_output.weight".
      rules.push_back(WeightRenaming{std::string("^") + n.gguf + "$", n.hf, true, std::string("GGUF ") + n.gguf});
    }
  }
  return rules;
}

Result<std::string> gguf_architecture_for(const ModelConfig& config) {
  const Family* fam = family_by_type(config.model_type);
  if (!fam)
    return unsupported(config.source + ": model_type '" + config.model_type +
                       "' has no GGUF mapping (supported: llama, mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe, phi3, "
                       "gemma2, gemma3_text, gemma3, gpt_oss)");
  return std::string(fam->gguf_arch);
}

Result<std::vector<std::pair<std::string, GgufValue>>> gguf_metadata_for(const ModelConfig& c) {
  LOOM_ASSIGN_OR_RETURN(std::string arch, gguf_architecture_for(c));
  const std::string p = arch + ".";
  auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  std::vector<std::pair<std::string, GgufValue>> m;
  m.emplace_back("general.architecture", GgufValue::string(arch));
  m.emplace_back(p + "context_length", u32(c.max_position_embeddings));
  m.emplace_back(p + "embedding_length", u32(c.hidden_size));
  m.emplace_back(p + "block_count", u32(c.num_hidden_layers));
  m.emplace_back(p + "feed_forward_length", u32(c.intermediate_size));
  m.emplace_back(p + "attention.head_count", u32(c.num_attention_heads));
  m.emplace_back(p + "attention.head_count_kv", u32(c.num_key_value_heads));
  m.emplace_back(p + "attention.key_length", u32(c.head_dim));
  m.emplace_back(p + "attention.value_length", u32(c.head_dim));
  m.emplace_back(p + "attention.layer_norm_rms_epsilon", GgufValue::f32(static_cast<float>(c.rms_norm_eps)));
  m.emplace_back(p + "rope.freq_base", GgufValue::f32(static_cast<float>(c.rope_theta)));
  m.emplace_back(p + "rope.dimension_count", u32(c.rotary_dim()));
  m.emplace_back(p + "vocab_size", u32(c.vocab_size));
  if (c.num_experts > 0) {
    m.emplace_back(p + "expert_count", u32(c.num_experts));
    m.emplace_back(p + "expert_used_count", u32(c.num_experts_per_tok));
    if (c.model_type == "qwen2_moe") {
      auto field = [&c](const char* key) { return c.raw.contains(key) && c.raw.at(key).is_number_integer() ? c.raw.at(key).get<int64_t>() : 0; };
      m.emplace_back(p + "expert_feed_forward_length", u32(field("moe_intermediate_size")));
      m.emplace_back(p + "expert_shared_feed_forward_length", u32(field("shared_expert_intermediate_size")));
      m.emplace_back(p + "expert_weights_norm",
                     GgufValue::boolean(c.raw.value("norm_topk_prob", false)));
    }
    if (c.model_type == "qwen3_moe") {
      // llama.cpp runs every qwen3moe layer sparse and always renormalises the
      // top-k weights: a file of any other model would run differently there.
      auto field = [&c](const char* key) { return c.raw.contains(key) && c.raw.at(key).is_number_integer() ? c.raw.at(key).get<int64_t>() : 0; };
      const bool norm = c.raw.contains("norm_topk_prob") && c.raw.at("norm_topk_prob").is_boolean() &&
                        c.raw.at("norm_topk_prob").get<bool>();
      if (!norm)
        return unsupported(c.source + ": Qwen3-MoE with norm_topk_prob false has no GGUF form (llama.cpp's qwen3moe "
                                      "always renormalises the top-k expert weights)");
      const bool dense_layers = (c.raw.contains("decoder_sparse_step") && field("decoder_sparse_step") != 1) ||
                                (c.raw.contains("mlp_only_layers") && c.raw.at("mlp_only_layers").is_array() &&
                                 !c.raw.at("mlp_only_layers").empty());
      if (dense_layers)
        return unsupported(c.source + ": Qwen3-MoE with dense layers (mlp_only_layers / decoder_sparse_step) has no "
                                      "GGUF form (llama.cpp's qwen3moe makes every layer sparse)");
      const int64_t moe_ffn = c.raw.contains("moe_intermediate_size") ? field("moe_intermediate_size") : 768;
      m.emplace_back(p + "expert_feed_forward_length", u32(moe_ffn));  // Qwen3MoeConfig's default
    }
  }
  if (c.model_type == "gpt_oss") {
    // llama.cpp's gpt-oss hard-codes the SwiGLU (alpha 1.702, limit 7), routes by a
    // softmax over the top-k logits and slides exactly the even layers.
    auto number = [&c](const char* key, double fallback) {
      return c.raw.contains(key) && c.raw.at(key).is_number() ? c.raw.at(key).get<double>() : fallback;
    };
    if (number("swiglu_limit", 7.0) != 7.0 || number("swiglu_alpha", 1.702) != 1.702)
      return unsupported(c.source + ": gpt-oss with swiglu_limit / swiglu_alpha other than 7 / 1.702 has no GGUF form "
                                    "(llama.cpp's gpt-oss hard-codes them)");
    for (size_t i = 0; i < c.layer_types.size(); ++i)
      if ((c.layer_types[i] == "sliding_attention") != (i % 2 == 0))
        return unsupported(c.source + ": gpt-oss layer " + std::to_string(i) + " is " + c.layer_types[i] +
                           "; llama.cpp's gpt-oss slides exactly the even layers");
    if (!c.sliding_window || *c.sliding_window <= 0)
      return unsupported(c.source + ": gpt-oss without a sliding window has no GGUF form");
    m.emplace_back(p + "expert_feed_forward_length", u32(c.intermediate_size));
    m.emplace_back(p + "attention.sliding_window", u32(*c.sliding_window));
  }
  if (c.eos_token_ids.size() > 1)
    m.emplace_back("tokenizer.ggml.eot_token_id", GgufValue::u32(static_cast<uint32_t>(c.eos_token_ids[1])));
  const RopeScaling& rs = c.rope_scaling;
  if (rs.rope_type == "linear" || rs.rope_type == "yarn") {
    m.emplace_back(p + "rope.scaling.type", GgufValue::string(rs.rope_type));
    m.emplace_back(p + "rope.scaling.factor", GgufValue::f32(static_cast<float>(rs.factor)));
    if (rs.original_max_position_embeddings > 0)
      m.emplace_back(p + "rope.scaling.original_context_length", u32(rs.original_max_position_embeddings));
    if (rs.rope_type == "yarn" && !rs.truncate) m.emplace_back(kYarnTruncateKey, GgufValue::boolean(false));
  } else if (rs.rope_type == "llama3") {
    // llama.cpp reads the rope_freqs.weight tensor (gguf_extra_tensors_for); the
    // parameters themselves, for loom, under keys llama.cpp ignores.
    const double orig = static_cast<double>(rs.original_max_position_embeddings > 0 ? rs.original_max_position_embeddings
                                                                                     : c.max_position_embeddings);
    const double values[] = {rs.factor, rs.low_freq_factor, rs.high_freq_factor, orig};
    for (int i = 0; i < 4; ++i) m.emplace_back(kLlama3Keys[i], GgufValue::f32(static_cast<float>(values[i])));
  } else if (rs.rope_type == "longrope") {
    // The factors travel as tensors (gguf_extra_tensors_for), as llama.cpp's Phi-3.
    m.emplace_back(p + "rope.scaling.original_context_length", u32(rs.original_max_position_embeddings));
    m.emplace_back(p + "rope.scaling.attn_factor", GgufValue::f32(static_cast<float>(rs.attention_factor)));
  } else if (rs.rope_type != "default") {
    return unsupported(c.source + ": rope_scaling type '" + rs.rope_type +
                       "' has no GGUF form loom writes (default, linear, yarn, llama3, longrope)");
  }
  const bool slides = c.sliding_window && *c.sliding_window > 0 &&
                      std::find(c.layer_types.begin(), c.layer_types.end(), "sliding_attention") != c.layer_types.end();
  if (c.model_type == "gemma2") {
    auto number = [&c](const char* key, double fallback) {
      return c.raw.contains(key) && c.raw.at(key).is_number() ? c.raw.at(key).get<double>() : fallback;
    };
    auto capped = [&c](const char* key) { return !c.raw.contains(key) || !c.raw.at(key).is_null(); };
    if (!capped("attn_logit_softcapping") || !capped("final_logit_softcapping"))
      return unsupported(c.source + ": Gemma2 without logit soft-capping has no GGUF form (llama.cpp always caps)");
    m.emplace_back(p + "attn_logit_softcapping", GgufValue::f32(static_cast<float>(number("attn_logit_softcapping", 50.0))));
    m.emplace_back(p + "final_logit_softcapping", GgufValue::f32(static_cast<float>(number("final_logit_softcapping", 30.0))));
    for (size_t i = 0; i < c.layer_types.size(); ++i)
      if ((c.layer_types[i] == "sliding_attention") != (i % 2 == 0))
        return unsupported(c.source + ": Gemma2 layer " + std::to_string(i) + " is " + c.layer_types[i] +
                           "; llama.cpp's Gemma2 slides exactly the even layers");
    if (!slides) return unsupported(c.source + ": Gemma2 without a sliding window has no GGUF form");
    m.emplace_back(p + "attention.sliding_window", u32(*c.sliding_window));
    // llama.cpp derives the attention scale from the layer count; loom reads this key back.
    m.emplace_back(kGemma2QueryScalarKey, GgufValue::f32(static_cast<float>(number("query_pre_attn_scalar", 256.0))));
    return m;
  }
  if (c.model_type == "gpt_oss") return m;
  if (arch == "gemma3") {
    auto number = [&c](const char* key, double fallback) {
      return c.raw.contains(key) && c.raw.at(key).is_number() ? c.raw.at(key).get<double>() : fallback;
    };
    if (slides) {
      for (size_t i = 0; i < c.layer_types.size(); ++i)
        if ((c.layer_types[i] == "sliding_attention") != ((i + 1) % kGemma3LlamaCppPattern != 0))
          return unsupported(c.source + ": Gemma3 layer " + std::to_string(i) + " is " + c.layer_types[i] +
                             "; llama.cpp's gemma3 makes every sixth layer full and the others sliding");
      m.emplace_back(p + "attention.sliding_window", u32(*c.sliding_window));
      const double local = number("rope_local_base_freq", kGemma3LlamaCppLocalBase);
      if (local != kGemma3LlamaCppLocalBase)
        return unsupported(c.source + ": Gemma3 with rope_local_base_freq " + std::to_string(local) +
                           " has no GGUF form (llama.cpp's gemma3 fixes the sliding layers' base at 10000)");
      m.emplace_back(p + "rope.freq_base_swa", GgufValue::f32(static_cast<float>(local)));
    } else if (std::find(c.layer_types.begin(), c.layer_types.end(), "sliding_attention") != c.layer_types.end()) {
      return unsupported(c.source + ": Gemma3 sliding layers without a sliding_window have no GGUF form");
    }
    // Gemma3ForCausalLM's final soft-cap (llama.cpp applies the key when present);
    // Gemma3ForConditionalGeneration never applies one.
    if (c.model_type == "gemma3_text" && c.raw.contains("final_logit_softcapping") &&
        c.raw.at("final_logit_softcapping").is_number())
      m.emplace_back(p + "final_logit_softcapping",
                     GgufValue::f32(static_cast<float>(c.raw.at("final_logit_softcapping").get<double>())));
    // llama.cpp derives the attention scale from the shape; loom reads this key back.
    m.emplace_back(kGemma3QueryScalarKey, GgufValue::f32(static_cast<float>(number("query_pre_attn_scalar", 256.0))));
    return m;
  }
  if (slides && c.model_type == "phi3")  // every Phi-3 layer slides when the window is set
    m.emplace_back(p + "attention.sliding_window", u32(*c.sliding_window));
  else if (slides)
    return unsupported(c.source + ": sliding-window attention has no GGUF form for " + arch);
  return m;
}

Result<GgufTensorName> gguf_tensor_name_for(const ModelConfig& config, const std::string& parameter_name) {
  const Family* fam = family_by_type(config.model_type);
  if (!fam) return unsupported("GGUF: model_type '" + config.model_type + "' has no GGUF mapping");
  if (fam->fused_qkv_gate_up) {
    static const std::pair<const char*, const char*> fused[] = {
        {"model.layers.*.self_attn.q_proj.weight", "blk.*.attn_qkv.weight"},
        {"model.layers.*.self_attn.k_proj.weight", "blk.*.attn_qkv.weight"},
        {"model.layers.*.self_attn.v_proj.weight", "blk.*.attn_qkv.weight"},
        {"model.layers.*.mlp.gate_proj.weight", "blk.*.ffn_up.weight"},
        {"model.layers.*.mlp.up_proj.weight", "blk.*.ffn_up.weight"},
    };
    for (size_t i = 0; i < std::size(fused); ++i)
      if (auto star = match_layer(fused[i].first, parameter_name)) {
        GgufTensorName out;
        out.gguf_name = with_layer(fused[i].second, *star);
        out.part = static_cast<int>(i < 3 ? i : i - 3);
        out.parts = i < 3 ? 3 : 2;
        return out;
      }
  }
  if (fam->experts)
    if (auto star = match_layer("model.layers.*.mlp.experts.gate_up_proj", parameter_name)) {
      GgufTensorName out;
      out.split_into = {with_layer("blk.*.ffn_gate_exps.weight", *star), with_layer("blk.*.ffn_up_exps.weight", *star)};
      return out;
    }
  if (fam->gpt_oss)
    if (auto star = match_layer("model.layers.*.mlp.experts.gate_up_proj_bias", parameter_name)) {
      GgufTensorName out;
      out.split_into = {with_layer("blk.*.ffn_gate_exps.bias", *star), with_layer("blk.*.ffn_up_exps.bias", *star)};
      return out;
    }
  for (const NamePair& n : plain_names(*fam)) {
    if (auto star = match_layer(n.hf, parameter_name)) {
      GgufTensorName out;
      out.gguf_name = with_layer(n.gguf, *star);
      out.rope_heads = fam->interleaved_rope ? rope_heads_of(n.rope, config) : 0;
      if (fam->gemma_norms && is_norm_weight(n.gguf)) out.add = 1.0;
      return out;
    }
  }
  return not_found("GGUF: no GGUF name for parameter '" + parameter_name + "' of " + config.model_type);
}

}  // namespace loom::models
