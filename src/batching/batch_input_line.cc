#include "loom/batching/batch_input_line.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/io/json_fields.h"
#include "loom/structured/constraint.h"
#include "loom/structured/request_constraint.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::batching {

using json = nlohmann::json;

Result<BatchInput> parse_batch_input_line(std::string_view line, size_t line_number, const Tokenizer* tokenizer,
                                          bool add_special_tokens, structured::ConstraintRegistry* constraints) {
  const std::string line_name = "input line " + std::to_string(line_number);
  const std::string where = line_name + ": ";
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return parse_error(where + "not a JSON object");
  BatchInput in;
  try {
    if (j.contains("id")) in.options.request_id = j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump();
    if (j.contains("prompt_ids")) {
      if (!j["prompt_ids"].is_array())
        return parse_error(where + io::field_type_message("prompt_ids", "a list of token ids", j["prompt_ids"]));
      for (const json& v : j["prompt_ids"]) {
        const std::optional<int64_t> integer = io::json_integer(v);
        if (!integer) return parse_error(where + io::field_type_message("prompt_ids", "a list of token ids", v));
        const int64_t id = *integer;
        if (id < 0 || id > 0x7fffffff) return out_of_range(where + "token id " + std::to_string(id) + " is out of range");
        in.input_ids.push_back(static_cast<int32_t>(id));
      }
    } else if (j.contains("prompt")) {
      if (!j["prompt"].is_string()) return parse_error(where + io::field_type_message("prompt", "a string", j["prompt"]));
      if (!tokenizer)
        return invalid_argument(where + "a text prompt needs the model's tokenizer.json (give prompt_ids)");
      LOOM_ASSIGN_OR_RETURN(Encoding e, tokenizer->encode(j["prompt"].get<std::string>(), add_special_tokens));
      in.input_ids = std::move(e.ids);
    } else {
      return parse_error(where + "needs 'prompt' or 'prompt_ids'");
    }
    auto& o = in.options;
    const io::JsonFields fields(j, line_name);
    // Ranges of the target types only: what values make sense is the manager's to check.
    constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min(), kInt32Max = std::numeric_limits<int32_t>::max();
    LOOM_ASSIGN_OR_RETURN(o.max_new_tokens, fields.int_field("max_new_tokens", std::numeric_limits<int64_t>::min(),
                                                               std::numeric_limits<int64_t>::max()));
    LOOM_ASSIGN_OR_RETURN(o.temperature, fields.float_field("temperature"));
    if (o.temperature) o.do_sample = *o.temperature > 0;
    LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> top_k, fields.int_field("top_k", kInt32Min, kInt32Max));
    if (top_k) o.top_k = static_cast<int32_t>(*top_k), o.do_sample = true;
    LOOM_ASSIGN_OR_RETURN(o.top_p, fields.float_field("top_p"));
    LOOM_ASSIGN_OR_RETURN(o.min_p, fields.float_field("min_p"));
    if (o.top_p || o.min_p) o.do_sample = true;
    LOOM_ASSIGN_OR_RETURN(o.repetition_penalty, fields.float_field("repetition_penalty"));
    LOOM_ASSIGN_OR_RETURN(o.seed, fields.uint64_field("seed"));
    LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> sequences, fields.int_field("num_return_sequences", kInt32Min, kInt32Max));
    if (sequences) o.num_return_sequences = static_cast<int32_t>(*sequences);
    LOOM_ASSIGN_OR_RETURN(o.stop_strings, fields.string_or_string_list("stop"));
    LOOM_ASSIGN_OR_RETURN(o.prompt_lookup_num_tokens, fields.int_field("prompt_lookup_num_tokens"));
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
