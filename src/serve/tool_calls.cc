#include "serve/tool_calls.h"

#include "loom/structured/json_schema_to_grammar.h"

namespace loom::serve {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view rstrip(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}
std::string_view lstrip(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}

bool declared(const ojson& tools, const std::string& name) {
  if (!tools.is_array()) return false;
  for (const ojson& t : tools)
    if (t["function"]["name"] == name) return true;
  return false;
}

// {"name": …, "arguments" | "parameters": {…}} naming a declared tool → the call.
std::optional<ToolCall> call_from_json(std::string_view text, const ojson& tools) {
  ojson j = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || !declared(tools, name->get<std::string>())) return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  ojson value = args == j.end() || args->is_null() ? ojson::object() : *args;
  if (value.is_string()) {  // some models write the arguments as a JSON string
    ojson inner = ojson::parse(value.get<std::string>(), nullptr, false);
    if (inner.is_discarded()) return std::nullopt;
    value = std::move(inner);
  }
  if (!value.is_object()) return std::nullopt;
  return ToolCall{name->get<std::string>(), value.dump(-1, ' ', false, ojson::error_handler_t::replace)};
}

// End (one past) of the JSON object or array starting at s[0], or npos if it does
// not close within s.
size_t json_value_end(std::string_view s) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

ParsedReply parse_hermes(std::string_view text, const ojson& tools, bool final) {
  ParsedReply out;
  const size_t open = text.find(kCallOpen);
  if (open == std::string_view::npos) {
    if (final) {
      out.content = std::string(text);
      return out;
    }
    // Hold back what may still become "<tool_call>", and trailing space (dropped
    // before a call).
    std::string_view kept = text;
    for (size_t k = std::min(kCallOpen.size() - 1, kept.size()); k > 0; --k)
      if (kept.substr(kept.size() - k) == kCallOpen.substr(0, k)) {
        kept.remove_suffix(k);
        break;
      }
    out.content = std::string(rstrip(kept));
    return out;
  }
  for (size_t pos = open; (pos = text.find(kCallOpen, pos)) != std::string_view::npos;) {
    const size_t body = pos + kCallOpen.size();
    const size_t close = text.find(kCallClose, body);
    if (close == std::string_view::npos) break;
    if (std::optional<ToolCall> call = call_from_json(text.substr(body, close - body), tools))
      out.calls.push_back(std::move(*call));
    pos = close + kCallClose.size();
  }
  if (final && out.calls.empty()) {
    out.content = std::string(text);  // no well-formed call: the reply is text
    return out;
  }
  const std::string_view before = rstrip(text.substr(0, open));
  if (!(final && before.empty())) out.content = std::string(before);
  return out;
}

ParsedReply parse_llama3(std::string_view text, const ojson& tools, bool final) {
  ParsedReply out;
  std::string_view s = lstrip(text);
  if (s.substr(0, kPythonTag.size()) == kPythonTag) s = lstrip(s.substr(kPythonTag.size()));
  const bool may_be_call = s.empty() || s.front() == '{' || kPythonTag.substr(0, s.size()) == s;
  if (!may_be_call) {
    out.content = std::string(text);
    return out;
  }
  if (!final) {
    out.content = std::string();
    return out;
  }
  // One JSON call, or several joined by ';', and nothing else.
  while (!s.empty()) {
    const size_t end = s.front() == '{' ? json_value_end(s) : std::string_view::npos;
    std::optional<ToolCall> call;
    if (end != std::string_view::npos) call = call_from_json(s.substr(0, end), tools);
    if (!call) {
      out.calls.clear();
      break;
    }
    out.calls.push_back(std::move(*call));
    s = lstrip(s.substr(end));
    if (!s.empty() && s.front() == ';') s = lstrip(s.substr(1));
    else if (!s.empty()) {
      out.calls.clear();
      break;
    }
  }
  if (out.calls.empty()) out.content = std::string(text);
  return out;
}

// "$ref": "#/…" inside a tool's parameters, re-rooted at `base` (where the parameters
// sit in the combined schema).
void rebase_refs(ojson& v, const std::string& base) {
  if (v.is_object()) {
    for (auto& [key, child] : v.items()) {
      if (key == "$ref" && child.is_string() && child.get<std::string>().rfind('#', 0) == 0)
        child = base + child.get<std::string>().substr(1);
      else
        rebase_refs(child, base);
    }
  } else if (v.is_array()) {
    for (ojson& child : v) rebase_refs(child, base);
  }
}

size_t skip_space(std::string_view s, size_t p) {
  while (p < s.size() && is_space(s[p])) ++p;
  return p;
}

}  // namespace

ParsedReply parse_forced_tool_call(ToolCallFormat format, std::string_view text, bool final) {
  ParsedReply out;
  const std::string_view s = text;
  const std::string_view args_key = format == ToolCallFormat::kLlama3Json ? "\"parameters\"" : "\"arguments\"";
  // Calls follow each other (Hermes blocks, or Llama 3 objects joined by ';'); each is
  // {"name": "f", "arguments" | "parameters": ARGS}, with the keys in this order and at
  // most a space around the punctuation, as the grammar writes them.
  size_t pos = 0;
  while (true) {
    size_t obj;
    if (format == ToolCallFormat::kHermesTags) {
      const size_t open = s.find(kCallOpen, pos);
      if (open == std::string_view::npos) break;
      obj = s.find('{', open + kCallOpen.size());
    } else {
      obj = skip_space(s, pos);
      if (!out.calls.empty()) {
        if (obj >= s.size() || s[obj] != ';') break;
        obj = skip_space(s, obj + 1);
      }
      if (obj >= s.size() || s[obj] != '{') break;
    }
    if (obj == std::string_view::npos) break;  // Hermes: the tag without its object yet
    const size_t key = s.find("\"name\"", obj);
    if (key == std::string_view::npos) break;
    size_t p = skip_space(s, key + 6);
    if (p >= s.size() || s[p] != ':') break;
    p = skip_space(s, p + 1);
    if (p >= s.size() || s[p] != '"') break;
    const size_t name_end = s.find('"', p + 1);
    if (name_end == std::string_view::npos) break;
    ToolCall call{std::string(s.substr(p + 1, name_end - p - 1)), ""};
    size_t args = s.find(args_key, name_end + 1);
    if (args != std::string_view::npos) {
      args = skip_space(s, args + args_key.size());
      args = args < s.size() && s[args] == ':' ? skip_space(s, args + 1) : std::string_view::npos;
    }
    const size_t call_len = json_value_end(s.substr(obj));
    if (call_len != std::string_view::npos) {
      // A closed call: its arguments are the last member, up to the call's own brace.
      const size_t close = obj + call_len - 1;
      if (args != std::string_view::npos && args < close) call.arguments = std::string(rstrip(s.substr(args, close - args)));
      out.calls.push_back(std::move(call));
      pos = obj + call_len;
      if (format == ToolCallFormat::kHermesTags) {
        const size_t tag = s.find(kCallClose, pos);
        if (tag == std::string_view::npos) break;
        pos = tag + kCallClose.size();
      }
      continue;
    }
    // Still being written: what is there can no longer change (short of trailing space,
    // which may yet be inside a string); a closed arguments value is the whole of it.
    if (args != std::string_view::npos && args <= s.size()) {
      const std::string_view rest = s.substr(args);
      const size_t value_len = !rest.empty() && (rest[0] == '{' || rest[0] == '[') ? json_value_end(rest) : std::string_view::npos;
      call.arguments = std::string(value_len != std::string_view::npos ? rest.substr(0, value_len) : rstrip(rest));
    }
    if (final) {
      out.calls.push_back(std::move(call));  // cut by max_tokens: the call keeps what was written
    } else {
      out.partial = std::move(call);
    }
    break;
  }
  if (out.calls.empty() && !out.partial) {
    out.content = final ? std::string(text) : std::string();  // not (yet) a call
  } else if (out.partial) {
    out.content = std::string();
  }
  return out;
}

void keep_first_call(ParsedReply* reply) {
  if (reply->calls.empty()) return;
  reply->calls.resize(1);
  reply->partial.reset();
}

ToolCallFormat detect_tool_call_format(std::string_view t) {
  if (t.find(kCallOpen) != std::string_view::npos) return ToolCallFormat::kHermesTags;
  if (t.find("<|start_header_id|>") != std::string_view::npos && t.find("\"parameters\"") != std::string_view::npos)
    return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kUnknown;
}

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kHermesTags: return "hermes";
    default: return "unknown";
  }
}

ParsedReply parse_tool_calls(ToolCallFormat format, std::string_view text, const ojson& tools, bool final) {
  switch (format) {
    case ToolCallFormat::kHermesTags: return parse_hermes(text, tools, final);
    case ToolCallFormat::kLlama3Json: return parse_llama3(text, tools, final);
    default: {
      ParsedReply out;
      out.content = std::string(text);
      return out;
    }
  }
}

std::optional<ApiError> forced_tool_call_constraint(ToolCallFormat format, const ojson& tools, const std::string& name,
                                                    bool several, RequestedConstraint* out) {
  const std::string args_key = format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  ojson alternatives = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& fn = tools[i]["function"];
    if (!name.empty() && fn["name"] != name) continue;
    ojson params = fn.contains("parameters") && fn["parameters"].is_object()
                       ? fn["parameters"]
                       : ojson{{"type", "object"}, {"properties", ojson::object()}};
    const bool strict = fn.contains("strict") && fn["strict"].is_boolean() && fn["strict"].get<bool>();
    const std::string param = "tools[" + std::to_string(i) + "].function.parameters";
    Result<std::string> alone = structured::json_schema_to_gbnf(params.dump(), strict);
    if (!alone.ok()) {
      ApiError e = bad_field(param, "'" + param + "': " + alone.status().message());
      if (alone.status().code() == ErrorCode::kUnsupported) e.code = "unsupported_schema";
      return e;
    }
    rebase_refs(params, "#/anyOf/" + std::to_string(alternatives.size()) + "/properties/" + args_key);
    alternatives.push_back({{"type", "object"},
                            {"properties", {{"name", {{"const", fn["name"]}}}, {args_key, std::move(params)}}},
                            {"required", {"name", args_key}},
                            {"additionalProperties", false}});
  }
  const ojson combined = {{"anyOf", std::move(alternatives)}};
  out->param = "tools";
  out->spec = structured::ConstraintSpec{};
  // Each tool was checked with its own strictness above; the combination is compiled lax.
  Result<std::string> gbnf = structured::json_schema_to_gbnf(combined.dump(), /*strict=*/false);
  if (!gbnf.ok()) return bad_field("tools", "'tools': " + gbnf.status().message());
  // The schema's start rule is its first line, "root ::= …"; nothing else refers to it.
  std::string body = *gbnf;
  if (body.rfind("root ::= ", 0) != 0) return bad_field("tools", "'tools': unexpected grammar from the schema compiler");
  body = "tool-call-json ::= " + body.substr(9);
  // Several calls are written the way each family's template renders them in history:
  // Hermes blocks one per line, Llama 3 objects joined by "; ".
  const bool llama = format == ToolCallFormat::kLlama3Json;
  std::string root = std::string("root ::= tool-call") + (several ? (llama ? " (\"; \" tool-call)*" : " (\"\\n\" tool-call)*") : "") + "\n";
  root += llama ? "tool-call ::= tool-call-json\n" : "tool-call ::= \"<tool_call>\\n\" tool-call-json \"\\n</tool_call>\"\n";
  out->spec.kind = structured::ConstraintSpec::Kind::kGrammar;
  out->spec.text = root + body;
  return std::nullopt;
}

}  // namespace loom::serve
