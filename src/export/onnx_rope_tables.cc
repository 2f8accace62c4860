#include "onnx_rope_tables.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

namespace loom::exporting {
namespace {

// 1.0 / (base ** (arange(0, dim, 2).float() / dim)), in f32 like PyTorch.
std::vector<float> default_inv_freq(double base, int64_t dim) {
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  const float b = static_cast<float>(base);
  for (int64_t i = 0; i < dim / 2; ++i)
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(b, static_cast<float>(2 * i) / static_cast<float>(dim));
  return inv;
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

double yarn_correction_dim(double rotations, int64_t dim, double base, double max_positions) {
  return (static_cast<double>(dim) * std::log(max_positions / (rotations * 2 * M_PI))) / (2 * std::log(base));
}

std::optional<double> optional_attr(const graph::Node& n, const char* key) {
  const double v = n.attr_float(key, -1.0);
  return v < 0 ? std::nullopt : std::optional<double>(v);
}

}  // namespace

Result<RopeTables> rope_tables(const graph::Node& n, int64_t positions) {
  const std::string type = n.attr_str("rope_type");
  const std::string where = "onnx export: rope '" + type + "' (" + n.scope + "): ";
  const int64_t dim = n.attr_int("rotary_dim");
  const double theta = n.attr_float("theta");
  const double factor_attr = n.attr_float("factor", 0.0);
  if (dim < 2 || dim % 2) return invalid_argument(where + "rotary_dim " + std::to_string(dim) + " must be even and ≥ 2");
  if (!(theta > 0) || !std::isfinite(theta)) return invalid_argument(where + "theta must be positive");
  if (positions < 1) return invalid_argument(where + "needs max_position_embeddings to size its cos/sin tables");
  auto need_factor = [&]() -> Status {
    if (!(factor_attr > 0) || !std::isfinite(factor_attr))
      return invalid_argument(where + "rope_scaling.factor is missing or not positive");
    return Status::Ok();
  };
  std::vector<float> inv;
  float scaling = 1.0f;
  if (type == "default") {
    inv = default_inv_freq(theta, dim);
  } else if (type == "linear") {
    LOOM_RETURN_IF_ERROR(need_factor());
    inv = default_inv_freq(theta, dim);
    for (float& v : inv) v /= static_cast<float>(factor_attr);
  } else if (type == "llama3") {
    LOOM_RETURN_IF_ERROR(need_factor());
    const int64_t original = n.attr_int("original_max_position_embeddings", 0);
    const double lo = n.attr_float("low_freq_factor", 1.0), hi = n.attr_float("high_freq_factor", 4.0);
    if (original < 1) return invalid_argument(where + "rope_scaling.original_max_position_embeddings is missing");
    if (!(hi > lo) || !(lo > 0)) return invalid_argument(where + "needs 0 < low_freq_factor < high_freq_factor");
    inv = default_inv_freq(theta, dim);
    const double old_len_d = static_cast<double>(original);
    const float low_wavelen = static_cast<float>(old_len_d / lo), high_wavelen = static_cast<float>(old_len_d / hi);
    const float factor = static_cast<float>(factor_attr), two_pi = static_cast<float>(2 * M_PI);
    const float old_len = static_cast<float>(old_len_d), lff = static_cast<float>(lo), span = static_cast<float>(hi - lo);
    for (float& v : inv) {
      const float wavelen = (1.0f / v) * two_pi;
      const float llama = wavelen > low_wavelen ? v / factor : v;
      const float smooth = ((1.0f / wavelen) * old_len - lff) / span;
      const float smoothed = ((1.0f - smooth) * llama) / factor + smooth * llama;
      v = (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) ? smoothed : llama;
    }
  } else if (type == "yarn") {
    const int64_t max_pos = n.attr_int("max_position_embeddings", 0);
    const int64_t orig_attr = n.attr_int("original_max_position_embeddings", 0);
    const int64_t original = orig_attr > 0 ? orig_attr : max_pos;
    if (original < 1) return invalid_argument(where + "needs original_max_position_embeddings or max_position_embeddings");
    double factor = factor_attr;
    if (factor <= 0) {
      if (max_pos < 1 || orig_attr < 1) return invalid_argument(where + "rope_scaling.factor is missing");
      factor = static_cast<double>(max_pos) / static_cast<double>(orig_attr);
    }
    const auto mscale = optional_attr(n, "mscale"), mscale_all = optional_attr(n, "mscale_all_dim");
    double attention_factor;
    if (auto af = optional_attr(n, "attention_factor")) attention_factor = *af;
    else if (mscale.value_or(0) != 0 && mscale_all.value_or(0) != 0)
      attention_factor = yarn_mscale(factor, *mscale) / yarn_mscale(factor, *mscale_all);
    else attention_factor = yarn_mscale(factor, 1);
    const double bf = n.attr_float("beta_fast", 32.0), bs = n.attr_float("beta_slow", 1.0);
    double low = yarn_correction_dim(bf != 0 ? bf : 32, dim, theta, static_cast<double>(original));
    double high = yarn_correction_dim(bs != 0 ? bs : 1, dim, theta, static_cast<double>(original));
    if (n.attr_int("truncate", 1) != 0) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;
    const float ramp_min = static_cast<float>(low), ramp_span = static_cast<float>(high - low);
    const float base = static_cast<float>(theta), f = static_cast<float>(factor);
    inv.resize(static_cast<size_t>(dim / 2));
    for (int64_t i = 0; i < dim / 2; ++i) {
      const float pos_freq = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
      const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (f * pos_freq);
      const float ramp = std::clamp((static_cast<float>(i) - ramp_min) / ramp_span, 0.0f, 1.0f);
      const float keep = 1.0f - ramp;
      inv[static_cast<size_t>(i)] = interpolation * (1.0f - keep) + extrapolation * keep;
    }
    scaling = static_cast<float>(attention_factor);
  } else if (type == "dynamic") {
    return internal_error(where + "dynamic NTK scaling depends on the sequence length at run time: it has no table "
                                  "(onnx_dynamic_rope_cos_sin computes it in the graph)");
  } else if (type == "longrope") {
    // Not a table over positions: a sequence past original_max_position_embeddings
    // rotates every position (its cached keys aside) with the long factors.
    return unsupported(where + "longrope picks its frequencies by the sequence's length at run time; it is not "
                               "exported (run it with loom, or export a model without rope_scaling)");
  } else {
    return unsupported(where + "unknown rope type (supported: default, linear, dynamic, llama3, yarn)");
  }
  RopeTables t;
  t.positions = positions;
  t.half = dim / 2;
  t.cos.resize(static_cast<size_t>(positions * t.half));
  t.sin.resize(t.cos.size());
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t i = 0; i < t.half; ++i) {
      const float angle = inv[static_cast<size_t>(i)] * static_cast<float>(p);
      t.cos[static_cast<size_t>(p * t.half + i)] = std::cos(angle) * scaling;
      t.sin[static_cast<size_t>(p * t.half + i)] = std::sin(angle) * scaling;
    }
  return t;
}

}  // namespace loom::exporting
