#include "loom/generation/generation_config.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace loom {
namespace {

Status field_error(const char* field, const std::string& why) {
  return invalid_argument(std::string("generation config: field '") + field + "' " + why);
}

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

Status GenerationConfig::validate() const {
  if (max_new_tokens && *max_new_tokens <= 0)
    return field_error("max_new_tokens", "must be greater than 0, got " + std::to_string(*max_new_tokens));
  if (max_length <= 0) return field_error("max_length", "must be greater than 0, got " + std::to_string(max_length));
  if (!(temperature >= 0) || !std::isfinite(temperature))
    return field_error("temperature", "must be a finite number >= 0, got " + num(temperature));
  if (top_k < 0) return field_error("top_k", "must be >= 0, got " + std::to_string(top_k));
  if (!(top_p > 0 && top_p <= 1)) return field_error("top_p", "must be in (0, 1], got " + num(top_p));
  if (min_p && !(*min_p >= 0 && *min_p <= 1)) return field_error("min_p", "must be in [0, 1], got " + num(*min_p));
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty))
    return field_error("repetition_penalty", "must be a finite number > 0, got " + num(repetition_penalty));
  if (num_return_sequences < 1)
    return field_error("num_return_sequences", "must be >= 1, got " + std::to_string(num_return_sequences));
  for (int64_t id : eos_token_ids)
    if (id < 0) return field_error("eos_token_id", "must not be negative, got " + std::to_string(id));
  if (bos_token_id && *bos_token_id < 0)
    return field_error("bos_token_id", "must not be negative, got " + std::to_string(*bos_token_id));
  if (prompt_lookup_num_tokens && (*prompt_lookup_num_tokens < 0 || *prompt_lookup_num_tokens > kMaxPromptLookupTokens))
    return field_error("prompt_lookup_num_tokens", "must be in [0, " + std::to_string(kMaxPromptLookupTokens) + "], got " +
                                                       std::to_string(*prompt_lookup_num_tokens));
  for (const std::string& s : stop_strings)
    if (s.empty()) return field_error("stop_strings", "must not contain an empty string");
  return Status::Ok();
}

int64_t GenerationConfig::new_token_budget(int64_t prompt_length) const {
  if (max_new_tokens) return *max_new_tokens;
  return std::max<int64_t>(0, max_length - prompt_length);
}

void GenerationConfig::inherit_special_tokens(const std::vector<int64_t>& eos, std::optional<int64_t> bos,
                                              std::optional<int64_t> pad) {
  if (eos_token_ids.empty()) eos_token_ids = eos;
  if (!bos_token_id) bos_token_id = bos;
  if (!pad_token_id) pad_token_id = pad;
}

generation::SamplingParams GenerationConfig::sampling() const {
  generation::SamplingParams p;
  p.do_sample = do_sample;
  p.temperature = static_cast<float>(temperature);
  p.top_k = static_cast<int32_t>(top_k);
  p.top_p = static_cast<float>(top_p);
  p.min_p = static_cast<float>(min_p.value_or(0.0));
  p.repetition_penalty = static_cast<float>(repetition_penalty);
  return p;
}

}  // namespace loom
