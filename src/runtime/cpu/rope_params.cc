// compute_inv_freq: Transformers' modeling_rope_utils.py rope initializers (default, linear,
// dynamic, llama3, yarn), with their arithmetic kept in the same precision: Python scalars are
// doubles, tensors are f32, `scalar / tensor` is PyTorch's reciprocal(tensor) * scalar, and a
// Python scalar meeting an f32 tensor is rounded to f32 first.
#include <algorithm>
#include <cmath>
#include <string>

#include "loom/runtime/cpu/rope.h"

namespace loom::cpu {
namespace {

// 1.0 / (base ** (arange(0, dim, 2).float() / dim))
std::vector<float> default_inv_freq(double base, int64_t dim) {
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  const float b = static_cast<float>(base);
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(b, exponent);
  }
  return inv;
}

double yarn_get_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

double yarn_correction_dim(double num_rotations, int64_t dim, double base, double max_positions) {
  return (static_cast<double>(dim) * std::log(max_positions / (num_rotations * 2 * M_PI))) / (2 * std::log(base));
}

}  // namespace

Status compute_inv_freq(const RopeParams& p, int64_t head_dim, int64_t seq_len, std::vector<float>* inv_freq,
                        float* attention_scaling) {
  const std::string where = "rope '" + p.type + "': ";
  if (head_dim < 2) return invalid_argument(where + "head_dim " + std::to_string(head_dim) + " is too small");
  if (!(p.partial_rotary_factor > 0 && p.partial_rotary_factor <= 1))
    return invalid_argument(where + "partial_rotary_factor " + std::to_string(p.partial_rotary_factor) +
                            " outside (0, 1]");
  const int64_t dim = static_cast<int64_t>(static_cast<double>(head_dim) * p.partial_rotary_factor);
  if (dim < 2 || dim % 2 != 0)
    return invalid_argument(where + "rotary dim int(head_dim * partial_rotary_factor) = " + std::to_string(dim) +
                            " must be even and >= 2");
  if (!(p.theta > 0) || !std::isfinite(p.theta))
    return invalid_argument(where + "rope_theta " + std::to_string(p.theta) + " must be positive");
  const int64_t half = dim / 2;
  auto need_factor = [&]() -> Status {
    if (!(p.factor > 0) || !std::isfinite(p.factor))
      return invalid_argument(where + "rope_scaling.factor is missing or not positive");
    return Status::Ok();
  };

  if (p.type == "default") {
    *inv_freq = default_inv_freq(p.theta, dim);
    *attention_scaling = 1.0f;
    return Status::Ok();
  }

  if (p.type == "linear") {
    LOOM_RETURN_IF_ERROR(need_factor());
    *inv_freq = default_inv_freq(p.theta, dim);
    const float f = static_cast<float>(p.factor);
    for (float& v : *inv_freq) v /= f;
    *attention_scaling = 1.0f;
    return Status::Ok();
  }

  if (p.type == "dynamic") {
    LOOM_RETURN_IF_ERROR(need_factor());
    if (p.max_position_embeddings < 1) return invalid_argument(where + "max_position_embeddings is missing");
    const double max_pos = static_cast<double>(p.max_position_embeddings);
    const double len = seq_len > 0 ? std::max<double>(static_cast<double>(seq_len), max_pos) : max_pos;
    const double base = p.theta * std::pow((p.factor * len / max_pos) - (p.factor - 1),
                                           static_cast<double>(dim) / static_cast<double>(dim - 2));
    *inv_freq = default_inv_freq(base, dim);
    *attention_scaling = 1.0f;
    return Status::Ok();
  }

  if (p.type == "llama3") {
    LOOM_RETURN_IF_ERROR(need_factor());
    if (p.original_max_position_embeddings < 1)
      return invalid_argument(where + "rope_scaling.original_max_position_embeddings is missing");
    if (!(p.high_freq_factor > p.low_freq_factor) || !(p.low_freq_factor > 0))
      return invalid_argument(where + "needs 0 < low_freq_factor < high_freq_factor");
    std::vector<float> inv = default_inv_freq(p.theta, dim);
    const double old_context_len = static_cast<double>(p.original_max_position_embeddings);
    const float low_freq_wavelen = static_cast<float>(old_context_len / p.low_freq_factor);
    const float high_freq_wavelen = static_cast<float>(old_context_len / p.high_freq_factor);
    const float factor = static_cast<float>(p.factor);
    const float two_pi = static_cast<float>(2 * M_PI);
    const float old_len = static_cast<float>(old_context_len);
    const float lff = static_cast<float>(p.low_freq_factor);
    const float span = static_cast<float>(p.high_freq_factor - p.low_freq_factor);
    for (float& v : inv) {
      const float wavelen = (1.0f / v) * two_pi;
      const float llama = wavelen > low_freq_wavelen ? v / factor : v;
      const float smooth = ((1.0f / wavelen) * old_len - lff) / span;
      const float smoothed = ((1.0f - smooth) * llama) / factor + smooth * llama;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      v = medium ? smoothed : llama;
    }
    *inv_freq = std::move(inv);
    *attention_scaling = 1.0f;
    return Status::Ok();
  }

  if (p.type == "yarn") {
    const int64_t original_max =
        p.original_max_position_embeddings > 0 ? p.original_max_position_embeddings : p.max_position_embeddings;
    if (original_max < 1)
      return invalid_argument(where + "needs original_max_position_embeddings or max_position_embeddings");
    double factor = p.factor;
    if (factor <= 0) {  // Transformers derives it for configs (DeepSeek-V3) that only give both lengths
      if (p.max_position_embeddings < 1 || p.original_max_position_embeddings < 1)
        return invalid_argument(where + "rope_scaling.factor is missing");
      factor = static_cast<double>(p.max_position_embeddings) / static_cast<double>(p.original_max_position_embeddings);
    }
    if (!std::isfinite(factor)) return invalid_argument(where + "rope_scaling.factor is not finite");
    double attention_factor;
    if (p.attention_factor.has_value()) {
      attention_factor = *p.attention_factor;
    } else if (p.mscale.value_or(0) != 0 && p.mscale_all_dim.value_or(0) != 0) {
      attention_factor = yarn_get_mscale(factor, *p.mscale) / yarn_get_mscale(factor, *p.mscale_all_dim);
    } else {
      attention_factor = yarn_get_mscale(factor, 1);
    }
    const double beta_fast = p.beta_fast != 0 ? p.beta_fast : 32;
    const double beta_slow = p.beta_slow != 0 ? p.beta_slow : 1;
    double low = yarn_correction_dim(beta_fast, dim, p.theta, static_cast<double>(original_max));
    double high = yarn_correction_dim(beta_slow, dim, p.theta, static_cast<double>(original_max));
    if (p.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;  // Transformers' guard against a zero-width ramp
    const float ramp_min = static_cast<float>(low);
    const float ramp_span = static_cast<float>(high - low);
    const float base = static_cast<float>(p.theta);
    const float f = static_cast<float>(factor);
    std::vector<float> inv(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      const float pos_freq = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
      const float extrapolation = 1.0f / pos_freq;
      const float interpolation = 1.0f / (f * pos_freq);
      const float ramp = std::clamp((static_cast<float>(i) - ramp_min) / ramp_span, 0.0f, 1.0f);
      const float extrapolation_factor = 1.0f - ramp;
      inv[static_cast<size_t>(i)] =
          interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
    }
    *inv_freq = std::move(inv);
    *attention_scaling = static_cast<float>(attention_factor);
    return Status::Ok();
  }

  if (p.type == "longrope") {
    // Transformers' _compute_longrope_parameters: 1 / (ext_factors * base ** (arange(0, dim, 2) / dim)).
    if (p.original_max_position_embeddings < 1)
      return invalid_argument(where + "needs original_max_position_embeddings");
    if (p.long_factor.size() != static_cast<size_t>(half) || p.short_factor.size() != static_cast<size_t>(half))
      return invalid_argument(where + "long_factor and short_factor need rotary_dim / 2 = " + std::to_string(half) +
                              " values each, got " + std::to_string(p.long_factor.size()) + " and " +
                              std::to_string(p.short_factor.size()));
    const std::vector<double>& ext = seq_len > p.original_max_position_embeddings ? p.long_factor : p.short_factor;
    const float b = static_cast<float>(p.theta);
    std::vector<float> inv(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
      inv[static_cast<size_t>(i)] = 1.0f / (static_cast<float>(ext[static_cast<size_t>(i)]) * std::pow(b, exponent));
    }
    *inv_freq = std::move(inv);
    double attention_factor = 1.0;
    if (p.attention_factor.has_value()) {
      attention_factor = *p.attention_factor;
    } else {
      const double factor = p.factor > 0 ? p.factor
                                         : static_cast<double>(p.max_position_embeddings) /
                                               static_cast<double>(p.original_max_position_embeddings);
      if (factor > 1.0)
        attention_factor =
            std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(p.original_max_position_embeddings)));
    }
    *attention_scaling = static_cast<float>(attention_factor);
    return Status::Ok();
  }

  return unsupported(where + "unknown rope type (supported: default, linear, dynamic, llama3, yarn, longrope)");
}

}  // namespace loom::cpu
