#include "loom/batching/batch_input_line.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/structured/constraint.h"
#include "loom/structured/request_constraint.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::batching {

using json = nlohmann::json;

namespace {

// A number read straight into a narrower type is undefined behaviour when it does
// not fit (1e300 into an int64_t): every numeric field is checked against its
// target type first, and the error names the field and the value.
class LineFields {
 public:
  LineFields(const json& line, const std::string& where) : line_(line), where_(where) {}

  // An integer (or an integral float, as some writers emit) within [lo, hi].
  Result<std::optional<int64_t>> integer(const char* key, int64_t lo, int64_t hi) const {
    if (!line_.contains(key)) return std::optional<int64_t>();
    const json& v = line_.at(key);
    std::optional<int64_t> got;
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() <= static_cast<uint64_t>(hi)) got = static_cast<int64_t>(v.get<uint64_t>());
    } else if (v.is_number_integer()) {
      got = v.get<int64_t>();
    } else if (v.is_number_float()) {
      const double d = v.get<double>();
      // ±9.2e18 is inside int64_t's range, whose ends are not doubles.
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) got = static_cast<int64_t>(d);
    }
    if (!got || *got < lo || *got > hi)
      return parse_error(where_ + "'" + key + "' must be an integer in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "], got " + describe(v));
    return got;
  }

  // A finite number that fits a float.
  Result<std::optional<float>> real(const char* key) const {
    if (!line_.contains(key)) return std::optional<float>();
    const json& v = line_.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()) ||
        std::fabs(v.get<double>()) > static_cast<double>(std::numeric_limits<float>::max()))
      return parse_error(where_ + "'" + key + "' must be a finite number, got " + describe(v));
    return std::optional<float>(static_cast<float>(v.get<double>()));
  }

 private:
  static std::string describe(const json& v) {
    std::string text = v.dump();
    return text.size() > 40 ? text.substr(0, 37) + "..." : text;
  }

  const json& line_;
  const std::string& where_;
};

}  // namespace

Result<BatchInput> parse_batch_input_line(std::string_view line, size_t line_number, const Tokenizer* tokenizer,
                                          bool add_special_tokens, structured::ConstraintRegistry* constraints) {
  const std::string where = "input line " + std::to_string(line_number) + ": ";
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return parse_error(where + "not a JSON object");
  BatchInput in;
  try {
    if (j.contains("id")) in.options.request_id = j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump();
    if (j.contains("prompt_ids")) {
      if (!j["prompt_ids"].is_array()) return parse_error(where + "'prompt_ids' must be a list of token ids");
      for (const json& v : j["prompt_ids"]) {
        if (!v.is_number_integer()) return parse_error(where + "'prompt_ids' holds a non-integer: " + v.dump());
        const int64_t id = v.get<int64_t>();
        if (id < 0 || id > 0x7fffffff) return out_of_range(where + "token id " + std::to_string(id) + " is out of range");
        in.input_ids.push_back(static_cast<int32_t>(id));
      }
    } else if (j.contains("prompt")) {
      if (!j["prompt"].is_string()) return parse_error(where + "'prompt' must be a string");
      if (!tokenizer)
        return invalid_argument(where + "a text prompt needs the model's tokenizer.json (give prompt_ids)");
      LOOM_ASSIGN_OR_RETURN(Encoding e, tokenizer->encode(j["prompt"].get<std::string>(), add_special_tokens));
      in.input_ids = std::move(e.ids);
    } else {
      return parse_error(where + "needs 'prompt' or 'prompt_ids'");
    }
    auto& o = in.options;
    const LineFields fields(j, where);
    // Ranges of the target types only: what values make sense is the manager's to check.
    constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min(), kInt32Max = std::numeric_limits<int32_t>::max();
    LOOM_ASSIGN_OR_RETURN(o.max_new_tokens, fields.integer("max_new_tokens", std::numeric_limits<int64_t>::min(),
                                                               std::numeric_limits<int64_t>::max()));
    LOOM_ASSIGN_OR_RETURN(o.temperature, fields.real("temperature"));
    if (o.temperature) o.do_sample = *o.temperature > 0;
    LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> top_k, fields.integer("top_k", kInt32Min, kInt32Max));
    if (top_k) o.top_k = static_cast<int32_t>(*top_k), o.do_sample = true;
    LOOM_ASSIGN_OR_RETURN(o.top_p, fields.real("top_p"));
    LOOM_ASSIGN_OR_RETURN(o.min_p, fields.real("min_p"));
    if (o.top_p || o.min_p) o.do_sample = true;
    LOOM_ASSIGN_OR_RETURN(o.repetition_penalty, fields.real("repetition_penalty"));
    if (j.contains("seed")) {
      // Seeds are 64-bit unsigned; the largest is written as an unsigned JSON integer.
      if (!j["seed"].is_number_unsigned() && !(j["seed"].is_number_integer() && j["seed"].get<int64_t>() >= 0))
        return parse_error(where + "'seed' must be a non-negative integer, got " + j["seed"].dump());
      o.seed = j["seed"].get<uint64_t>();
    }
    LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> sequences, fields.integer("num_return_sequences", kInt32Min, kInt32Max));
    if (sequences) o.num_return_sequences = static_cast<int32_t>(*sequences);
    if (j.contains("stop")) {
      if (j["stop"].is_string()) o.stop_strings.push_back(j["stop"].get<std::string>());
      else o.stop_strings = j["stop"].get<std::vector<std::string>>();
    }
    LOOM_ASSIGN_OR_RETURN(std::optional<structured::ConstraintSpec> spec,
                          structured::constraint_spec_from_request(j, where));
    if (spec) {
      if (!constraints) return invalid_argument(where + "a constrained output needs the model's tokenizer");
      auto c = constraints->get(*spec);
      if (!c.ok()) return Status(c.status().code(), where + c.status().message());
      o.constraint = *c;
    }
  } catch (const json::exception& e) {
    return parse_error(where + "a field has the wrong type (" + e.what() + ")");
  }
  return in;
}

}  // namespace loom::batching
