#include "loom/generation/generation_config.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace loom {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// generation/ may not use io/, so it reads its few fields itself.
class Reader {
 public:
  Reader(const json& j, const std::string& source) : j_(j), source_(source) {}

  bool given(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  Status wrong_type(const char* key, const char* expected) const {
    std::string dumped = j_.at(key).dump();
    if (dumped.size() > 40) dumped = dumped.substr(0, 37) + "...";
    return parse_error(source_ + ": field '" + key + "' must be " + expected + ", got " + dumped);
  }

  static std::optional<int64_t> as_int(const json& v) {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
      return static_cast<int64_t>(v.get<uint64_t>());
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return static_cast<int64_t>(d);
    }
    return std::nullopt;
  }

  Status read(const char* key, int64_t& out) const {
    if (!given(key)) return Status::Ok();
    std::optional<int64_t> v = as_int(j_.at(key));
    if (!v) return wrong_type(key, "an integer");
    out = *v;
    return Status::Ok();
  }
  Status read(const char* key, std::optional<int64_t>& out) const {
    int64_t v = 0;
    if (!given(key)) return Status::Ok();
    LOOM_RETURN_IF_ERROR(read(key, v));
    out = v;
    return Status::Ok();
  }
  Status read(const char* key, double& out) const {
    if (!given(key)) return Status::Ok();
    if (!j_.at(key).is_number()) return wrong_type(key, "a number");
    out = j_.at(key).get<double>();
    return Status::Ok();
  }
  Status read(const char* key, std::optional<double>& out) const {
    double v = 0;
    if (!given(key)) return Status::Ok();
    LOOM_RETURN_IF_ERROR(read(key, v));
    out = v;
    return Status::Ok();
  }
  Status read(const char* key, bool& out) const {
    if (!given(key)) return Status::Ok();
    if (!j_.at(key).is_boolean()) return wrong_type(key, "true or false");
    out = j_.at(key).get<bool>();
    return Status::Ok();
  }
  Status read(const char* key, std::vector<int64_t>& out) const {
    if (!given(key)) return Status::Ok();
    const json& v = j_.at(key);
    std::vector<int64_t> ids;
    for (const json& e : v.is_array() ? v : json::array({v})) {
      std::optional<int64_t> i = as_int(e);
      if (!i) return wrong_type(key, "an integer or a list of integers");
      ids.push_back(*i);
    }
    out = std::move(ids);
    return Status::Ok();
  }
  Status read(const char* key, std::vector<std::string>& out) const {
    if (!given(key)) return Status::Ok();
    const json& v = j_.at(key);
    std::vector<std::string> strs;
    for (const json& e : v.is_array() ? v : json::array({v})) {
      if (!e.is_string()) return wrong_type(key, "a string or a list of strings");
      strs.push_back(e.get<std::string>());
    }
    out = std::move(strs);
    return Status::Ok();
  }
  Status read_seed(const char* key, std::optional<uint64_t>& out) const {
    if (!given(key)) return Status::Ok();
    const json& v = j_.at(key);
    if (v.is_number_unsigned()) {
      out = v.get<uint64_t>();
      return Status::Ok();
    }
    std::optional<int64_t> i = as_int(v);
    if (!i || *i < 0) return wrong_type(key, "a non-negative integer");
    out = static_cast<uint64_t>(*i);
    return Status::Ok();
  }

 private:
  const json& j_;
  const std::string& source_;
};

Status field_error(const char* field, const std::string& why) {
  return invalid_argument(std::string("generation config: ") + field + " " + why);
}

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

Result<GenerationConfig> GenerationConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) return parse_error(source + ": must be a JSON object");
  GenerationConfig c;
  c.source = source;
  const Reader r(j, source);
  LOOM_RETURN_IF_ERROR(r.read("max_new_tokens", c.max_new_tokens));
  LOOM_RETURN_IF_ERROR(r.read("max_length", c.max_length));
  LOOM_RETURN_IF_ERROR(r.read("do_sample", c.do_sample));
  LOOM_RETURN_IF_ERROR(r.read("temperature", c.temperature));
  LOOM_RETURN_IF_ERROR(r.read("top_k", c.top_k));
  LOOM_RETURN_IF_ERROR(r.read("top_p", c.top_p));
  LOOM_RETURN_IF_ERROR(r.read("min_p", c.min_p));
  LOOM_RETURN_IF_ERROR(r.read("repetition_penalty", c.repetition_penalty));
  LOOM_RETURN_IF_ERROR(r.read("num_return_sequences", c.num_return_sequences));
  LOOM_RETURN_IF_ERROR(r.read("eos_token_id", c.eos_token_ids));
  LOOM_RETURN_IF_ERROR(r.read("bos_token_id", c.bos_token_id));
  LOOM_RETURN_IF_ERROR(r.read("pad_token_id", c.pad_token_id));
  LOOM_RETURN_IF_ERROR(r.read("stop_strings", c.stop_strings));
  LOOM_RETURN_IF_ERROR(r.read_seed("seed", c.seed));
  if (Status s = c.validate(); !s.ok()) return Status(s.code(), source + ": " + s.message());
  return c;
}

Result<GenerationConfig> GenerationConfig::from_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return invalid_argument(path + ": is a directory, not a JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return not_found(path + ": no such file");
    return io_error(path + ": cannot open: " + std::strerror(errno));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::exception& e) {
    return parse_error(path + ": not valid JSON: " + e.what());
  }
  return from_json(j, path);
}

Result<GenerationConfig> GenerationConfig::from_dir_or_default(const std::string& dir) {
  std::error_code ec;
  // A single-file model (GGUF) has no generation_config.json: defaults, with the
  // special tokens the model's config inherits (inherit_special_tokens).
  if (fs::is_regular_file(dir, ec)) return GenerationConfig{};
  if (!fs::is_directory(dir, ec)) return not_found(dir + ": no such directory");
  const fs::path file = fs::path(dir) / "generation_config.json";
  if (!fs::exists(file, ec)) return GenerationConfig{};
  return from_file(file.string());
}

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
