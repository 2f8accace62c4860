#include "loom/structured/request_constraint.h"

namespace loom::structured {

Result<std::optional<ConstraintSpec>> constraint_spec_from_request(const nlohmann::json& j, const std::string& where) {
  std::optional<ConstraintSpec> out;
  std::string given;
  auto one = [&](const char* field) -> Status {
    if (!given.empty())
      return invalid_argument(where + "'" + given + "' and '" + field + "' both constrain the output: give one");
    given = field;
    return Status::Ok();
  };
  if (j.contains("response_format")) {
    const auto& rf = j["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      return invalid_argument(where + "'response_format' must be an object with a string 'type'");
    const std::string type = rf["type"].get<std::string>();
    if (type == "json_object") {
      LOOM_RETURN_IF_ERROR(one("response_format"));
      out = ConstraintSpec{ConstraintSpec::Kind::kJsonObject, "", {}, true};
    } else if (type == "json_schema") {
      LOOM_RETURN_IF_ERROR(one("response_format"));
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
        return invalid_argument(where + "'response_format.json_schema' must be an object");
      const auto& js = rf["json_schema"];
      if (!js.contains("schema")) return invalid_argument(where + "'response_format.json_schema.schema' is missing");
      if (!js["schema"].is_object() && !js["schema"].is_boolean())
        return invalid_argument(where + "'response_format.json_schema.schema' must be a JSON Schema object");
      bool strict = true;
      if (js.contains("strict")) {
        if (!js["strict"].is_boolean()) return invalid_argument(where + "'response_format.json_schema.strict' must be true or false");
        strict = js["strict"].get<bool>();
      }
      out = ConstraintSpec{ConstraintSpec::Kind::kJsonSchema, js["schema"].dump(), {}, strict};
    } else if (type != "text") {
      return invalid_argument(where + "'response_format.type' must be text, json_object or json_schema, got '" + type + "'");
    }
  }
  for (const char* field : {"grammar", "regex"}) {
    if (!j.contains(field)) continue;
    LOOM_RETURN_IF_ERROR(one(field));
    if (!j[field].is_string() || j[field].get<std::string>().empty())
      return invalid_argument(where + "'" + field + "' must be a non-empty string");
    out = ConstraintSpec{std::string(field) == "grammar" ? ConstraintSpec::Kind::kGrammar : ConstraintSpec::Kind::kRegex,
                         j[field].get<std::string>(), {}, true};
  }
  if (j.contains("choice")) {
    LOOM_RETURN_IF_ERROR(one("choice"));
    const auto& c = j["choice"];
    if (!c.is_array() || c.empty()) return invalid_argument(where + "'choice' must be a non-empty list of strings");
    ConstraintSpec spec{ConstraintSpec::Kind::kChoice, "", {}, true};
    for (const auto& v : c) {
      if (!v.is_string() || v.get<std::string>().empty())
        return invalid_argument(where + "'choice' must be a non-empty list of non-empty strings");
      spec.choices.push_back(v.get<std::string>());
    }
    out = std::move(spec);
  }
  return out;
}

}  // namespace loom::structured
