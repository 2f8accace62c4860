#include "serve/response_constraint.h"

#include "loom/structured/request_constraint.h"
#include "serve/constraint_compiler.h"
#include "serve/engine.h"

namespace loom::serve {

namespace {

using ojson = nlohmann::ordered_json;
using plain_json = nlohmann::json;

// One source of a constraint, rewritten as the `loom batch` line fields the shared
// reader (structured::constraint_spec_from_request) understands.
struct Candidate {
  std::string param;  // the request field, for errors
  plain_json fields;  // {"response_format": …} | {"grammar": …} | {"regex": …} | {"choice": …}
};

// vLLM takes a schema as an object or as its JSON text.
std::optional<ApiError> schema_value(const ojson& v, const std::string& param, plain_json* schema) {
  if (v.is_string()) {
    plain_json parsed = plain_json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) return bad_field(param, "'" + param + "' is a string that is not valid JSON");
    *schema = std::move(parsed);
  } else {
    *schema = plain_json::parse(v.dump());
  }
  if (!schema->is_object() && !schema->is_boolean())
    return bad_field(param, "'" + param + "' must be a JSON Schema (an object)");
  return std::nullopt;
}

plain_json json_schema_format(plain_json schema) {
  return {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "schema"}, {"schema", std::move(schema)}}}}}};
}

// The vLLM fields (inside structured_outputs, or guided_* at the top level).
std::optional<ApiError> read_vllm_field(const std::string& key, const ojson& v, const std::string& param,
                                        std::vector<Candidate>* out) {
  if (key == "json") {
    plain_json schema;
    if (auto e = schema_value(v, param, &schema)) return e;
    out->push_back({param, json_schema_format(std::move(schema))});
  } else if (key == "json_object") {
    if (!v.is_boolean()) return bad_field(param, "'" + param + "' must be a boolean");
    if (v.get<bool>()) out->push_back({param, {{"response_format", {{"type", "json_object"}}}}});
  } else {
    out->push_back({param, {{key, plain_json::parse(v.dump())}}});  // regex, grammar, choice
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> read_requested_constraint(const ojson& body, std::optional<RequestedConstraint>* out) {
  out->reset();
  std::vector<Candidate> found;
  auto present = [&](const char* key) -> const ojson* {
    auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const ojson* rf = present("response_format")) {
    if (!rf->is_object()) return bad_field("response_format", "'response_format' must be an object with a \"type\"");
    found.push_back({"response_format", {{"response_format", plain_json::parse(rf->dump())}}});
  }
  if (const ojson* so = present("structured_outputs")) {
    if (!so->is_object()) return bad_field("structured_outputs", "'structured_outputs' must be an object");
    for (const auto& [key, v] : so->items()) {
      if (v.is_null()) continue;
      const std::string param = "structured_outputs." + key;
      if (key == "json" || key == "regex" || key == "grammar" || key == "choice" || key == "json_object") {
        if (auto e = read_vllm_field(key, v, param, &found)) return e;
      } else if (key == "structural_tag") {
        return bad_field(param, "'" + param + "' is not supported (choice, regex, grammar, json and json_object are)");
      }  // backend options (disable_fallback, whitespace_pattern, …) do not change what is allowed
    }
  }
  for (const char* key : {"guided_json", "guided_regex", "guided_grammar", "guided_choice"}) {
    if (const ojson* v = present(key))
      if (auto e = read_vllm_field(std::string(key).substr(7), *v, key, &found)) return e;
  }
  // {"type": "text"} asks for nothing; it does not count against another field.
  std::erase_if(found, [](const Candidate& c) {
    const auto it = c.fields.find("response_format");
    return it != c.fields.end() && it->contains("type") && (*it)["type"] == "text";
  });
  if (found.size() > 1)
    return bad_field(found[1].param, "'" + found[0].param + "' and '" + found[1].param +
                                         "' both constrain the output: give one");
  if (found.empty()) {
    // Still check a text response_format's shape.
    if (const ojson* rf = present("response_format")) {
      Result<std::optional<structured::ConstraintSpec>> s =
          structured::constraint_spec_from_request({{"response_format", plain_json::parse(rf->dump())}}, "");
      if (!s.ok()) return bad_field("response_format", s.status().message());
    }
    return std::nullopt;
  }
  Result<std::optional<structured::ConstraintSpec>> spec = structured::constraint_spec_from_request(found[0].fields, "");
  if (!spec.ok()) {
    std::string message = spec.status().message();
    if (found[0].param != "response_format") message = found[0].param + ": " + message;
    return bad_field(found[0].param, message);
  }
  if (*spec) *out = RequestedConstraint{std::move(**spec), found[0].param};
  return std::nullopt;
}

std::optional<ApiError> attach_constraint(Engine& engine, const RequestedConstraint& c, batching::RequestOptions* options,
                                          const std::function<bool()>& client_connected) {
  ConstraintCompiler* compiler = engine.constraint_compiler();
  if (!compiler)
    return bad_field(c.param, "'" + c.param + "' needs the model's tokenizer (tokenizer.json) to constrain its output");
  std::string param = c.param;
  if (param == "response_format" && c.spec.kind == structured::ConstraintSpec::Kind::kJsonSchema)
    param = "response_format.json_schema.schema";
  ConstraintCompiler::Outcome out = compiler->compile(c.spec, param, client_connected);
  if (out.error) return out.error;
  if (!out.constraint) {
    ApiError gone;
    gone.status = 499;
    gone.type = "client_disconnected";
    gone.message = "the client left while its output constraint compiled";
    return gone;
  }
  options->constraint = out.constraint;
  return std::nullopt;
}

}  // namespace loom::serve
