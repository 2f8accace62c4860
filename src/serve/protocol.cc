#include "serve/protocol.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "loom/generation/generation_config.h"
#include "loom/io/json_fields.h"
#include "serve/json_parse.h"

namespace loom::serve {

namespace {

using ojson = nlohmann::ordered_json;

const char* type_name(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return "null";
    case ojson::value_t::boolean: return "a boolean";
    case ojson::value_t::string: return "a string";
    case ojson::value_t::array: return "an array";
    case ojson::value_t::object: return "an object";
    case ojson::value_t::number_float: return "a float";
    default: return "an integer";
  }
}

// Reads the fields of one request object; the first problem is kept and every
// later read is a no-op, so a parser reads straight through and checks once.
class Fields {
 public:
  explicit Fields(const ojson& j) : j_(j) {}
  bool ok() const { return !error_; }
  const ojson& object() const { return j_; }
  void fail(const ApiError& e) {
    if (!error_) error_ = e;
  }
  const ApiError& error() const { return *error_; }
  void fail(const std::string& param, const std::string& message) {
    if (!error_) error_ = bad_field(param, message);
  }

  // Present and not null.
  const ojson* get(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  void boolean(const char* key, bool* out) {
    const ojson* v = get(key);
    if (!v || !ok()) return;
    if (!v->is_boolean()) return fail(key, io::field_type_message(key, "true or false", *v));
    *out = v->get<bool>();
  }
  void string(const char* key, std::optional<std::string>* out) {
    const ojson* v = get(key);
    if (!v || !ok()) return;
    if (!v->is_string()) return fail(key, io::field_type_message(key, "a string", *v));
    *out = v->get<std::string>();
  }
  template <class Int>
  void integer(const char* key, std::optional<Int>* out, int64_t lo, int64_t hi) {
    const ojson* v = get(key);
    if (!v || !ok()) return;
    const std::optional<int64_t> x = io::json_integer(*v);  // 16.0 is an integer too, as in Python
    if (!x || *x < lo || *x > hi)
      return fail(key, io::field_type_message(key, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", *v));
    *out = static_cast<Int>(*x);
  }
  // lo_open / hi_open: the bound itself is excluded.
  void number(const char* key, std::optional<float>* out, double lo, double hi, bool lo_open = false,
              bool hi_open = false) {
    const ojson* v = get(key);
    if (!v || !ok()) return;
    if (!v->is_number()) return fail(key, io::field_type_message(key, "a number", *v));
    const double x = v->get<double>();
    const bool below = lo_open ? !(x > lo) : !(x >= lo);
    const bool above = hi_open ? !(x < hi) : !(x <= hi);
    if (below || above) {
      auto bound = [](double b) {
        if (std::isinf(b)) return std::string(b > 0 ? "inf" : "-inf");
        std::string s = std::to_string(b);
        s.erase(s.find_last_not_of('0') + 1);
        if (!s.empty() && s.back() == '.') s.pop_back();
        return s;
      };
      return fail(key, io::field_type_message(key, std::string("a number in ") + (lo_open ? "(" : "[") + bound(lo) + ", " +
                                                       bound(hi) + (hi_open ? ")" : "]"),
                                              *v));
    }
    *out = static_cast<float>(x);
  }

 private:
  const ojson& j_;
  std::optional<ApiError> error_;
};

// Deepest nesting of [ and { outside strings: copying and printing JSON recurse,
// so a body nested thousands deep is refused before it is parsed.
int nesting_depth(const std::string& body) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

constexpr int kMaxNesting = 64;

// The body as a JSON object, or the 400 that says why not.
std::optional<ojson> parse_object(const std::string& body, ApiError* error) {
  if (nesting_depth(body) > kMaxNesting) {
    *error = bad_field("", "the request body nests JSON deeper than " + std::to_string(kMaxNesting) + " levels");
    return std::nullopt;
  }
  std::optional<ojson> parsed = parse_json(body);
  if (!parsed) {
    *error = bad_field("", "the request body is not valid JSON");
    return std::nullopt;
  }
  ojson& j = *parsed;
  if (!j.is_object()) {
    *error = bad_field("", std::string("the request body must be a JSON object, got ") + type_name(j));
    return std::nullopt;
  }
  return parsed;
}

// Token ids from a JSON array; `what` names it in errors.
bool read_ids(const ojson& a, const std::string& param, std::vector<int32_t>* out, Fields& f) {
  for (size_t i = 0; i < a.size(); ++i) {
    const ojson& v = a[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      f.fail(param, "'" + param + "' must hold token ids (non-negative integers); entry " + std::to_string(i) +
                        " is " + v.dump());
      return false;
    }
    out->push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return true;
}

void read_sampling(Fields& f, SamplingFields* s, bool chat) {
  f.string("model", &s->model);
  f.integer("max_tokens", &s->max_tokens, 1, std::numeric_limits<int32_t>::max());
  if (chat) f.integer("max_completion_tokens", &s->max_tokens, 1, std::numeric_limits<int32_t>::max());
  f.number("temperature", &s->temperature, 0, 2);
  f.number("top_p", &s->top_p, 0, 1, /*lo_open=*/true);
  f.integer("top_k", &s->top_k, -1, std::numeric_limits<int32_t>::max());
  f.number("min_p", &s->min_p, 0, 1);
  f.number("repetition_penalty", &s->repetition_penalty, 0, std::numeric_limits<double>::infinity(), true, true);
  f.number("presence_penalty", &s->presence_penalty, -2, 2);
  f.number("frequency_penalty", &s->frequency_penalty, -2, 2);
  std::optional<int64_t> seed;
  f.integer("seed", &seed, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  if (seed) s->seed = static_cast<uint64_t>(*seed);
  std::optional<int32_t> n;
  f.integer("n", &n, 1, 128);
  if (n) s->n = *n;
  f.boolean("stream", &s->stream);
  f.integer("prompt_lookup_num_tokens", &s->prompt_lookup_num_tokens, 0, kMaxPromptLookupTokens);
  if (!f.ok()) return;

  if (const ojson* bias = f.get("logit_bias")) {
    if (!bias->is_object()) return f.fail("logit_bias", io::field_type_message("logit_bias", "an object", *bias));
    for (const auto& [key, v] : bias->items()) {
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (...) {
        used = 0;
      }
      if (used != key.size() || id < 0 || id > std::numeric_limits<int32_t>::max())
        return f.fail("logit_bias", "'logit_bias' keys must be token ids, got \"" + key + "\"");
      if (!v.is_number() || !(v.get<double>() >= -100 && v.get<double>() <= 100))
        return f.fail("logit_bias", "'logit_bias' values must be numbers in [-100, 100]; token " + key + " has " + v.dump());
      s->logit_bias.emplace_back(static_cast<int32_t>(id), v.get<float>());
    }
  }
  if (const ojson* stop = f.get("stop")) {
    if (stop->is_string()) {
      s->stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const ojson& v : *stop) {
        if (!v.is_string()) return f.fail("stop", io::field_type_message("stop", "a string or a list of strings", *stop));
        s->stop.push_back(v.get<std::string>());
      }
    } else {
      return f.fail("stop", io::field_type_message("stop", "a string or a list of strings", *stop));
    }
    for (const std::string& x : s->stop)
      if (x.empty()) return f.fail("stop", "'stop' holds an empty string");
  }
  if (const ojson* so = f.get("stream_options")) {
    if (!so->is_object()) return f.fail("stream_options", io::field_type_message("stream_options", "an object", *so));
    if (!s->stream) return f.fail("stream_options", "'stream_options' is only allowed with \"stream\": true");
    Fields inner(*so);
    inner.boolean("include_usage", &s->include_usage);
    if (!inner.ok()) return f.fail("stream_options.include_usage", inner.error().message);
  }
  if (const ojson* user = f.get("user"); user && !user->is_string())
    return f.fail("user", io::field_type_message("user", "a string", *user));
  if (auto e = read_requested_constraint(f.object(), &s->constraint)) return f.fail(*e);
}

bool valid_reasoning_effort(const std::string& e) {
  return e == "none" || e == "minimal" || e == "low" || e == "medium" || e == "high";
}

bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

// OpenAI's tools (function tools only) and tool_choice.
void read_tools(Fields& f, ChatCompletionRequest* r) {
  r->tools = nullptr;
  if (const ojson* tools = f.get("tools")) {
    if (!tools->is_array()) return f.fail("tools", io::field_type_message("tools", "a list", *tools));
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string where = "tools[" + std::to_string(i) + "]";
      const ojson& t = (*tools)[i];
      if (!t.is_object()) return f.fail(where, "'" + where + "' must be an object");
      auto type = t.find("type");
      if (type == t.end() || !type->is_string() || *type != "function")
        return f.fail(where + ".type", "'" + where + ".type' must be \"function\" (the only tool type supported)");
      auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object()) return f.fail(where + ".function", "'" + where + ".function' must be an object");
      auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || !valid_function_name(name->get<std::string>()))
        return f.fail(where + ".function.name", "'" + where +
                                                    ".function.name' must be a string of 1 to 64 letters, digits, _ or -");
      for (size_t k = 0; k < i; ++k)
        if ((*tools)[k]["function"]["name"] == *name)
          return f.fail(where + ".function.name", "'" + where + ".function.name': two tools are named '" +
                                                      name->get<std::string>() + "'");
      auto params = fn->find("parameters");
      if (params != fn->end() && !params->is_null() && !params->is_object())
        return f.fail(where + ".function.parameters", "'" + where + ".function.parameters' must be a JSON Schema object");
      auto strict = fn->find("strict");
      if (strict != fn->end() && !strict->is_null() && !strict->is_boolean())
        return f.fail(where + ".function.strict", "'" + where + ".function.strict' must be a boolean");
    }
    if (!tools->empty()) r->tools = *tools;
  }
  f.boolean("parallel_tool_calls", &r->parallel_tool_calls);
  if (!f.ok()) return;
  r->tool_choice.mode = r->tools.is_null() ? ToolChoice::Mode::kNone : ToolChoice::Mode::kAuto;
  const ojson* choice = f.get("tool_choice");
  if (!choice) return;
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") r->tool_choice.mode = ToolChoice::Mode::kNone;
    else if (c == "auto") r->tool_choice.mode = ToolChoice::Mode::kAuto;
    else if (c == "required") r->tool_choice.mode = ToolChoice::Mode::kRequired;
    else return f.fail("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a named function, got \"" + c + "\"");
  } else if (choice->is_object()) {
    auto fn = choice->find("function");
    const ojson* name = nullptr;
    if (fn != choice->end() && fn->is_object() && fn->contains("name")) name = &(*fn)["name"];
    if (choice->value("type", ojson()) != "function" || !name || !name->is_string())
      return f.fail("tool_choice", "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": …}}");
    r->tool_choice.mode = ToolChoice::Mode::kNamed;
    r->tool_choice.name = name->get<std::string>();
  } else {
    return f.fail("tool_choice", io::field_type_message("tool_choice", "a string or an object", *choice));
  }
  if (r->tool_choice.mode != ToolChoice::Mode::kNone && r->tools.is_null())
    return f.fail("tool_choice", "'tool_choice' needs 'tools'");
  if (r->tool_choice.mode == ToolChoice::Mode::kNamed) {
    bool known = false;
    for (const ojson& t : r->tools) known = known || t["function"]["name"] == r->tool_choice.name;
    if (!known) return f.fail("tool_choice", "'tool_choice' names '" + r->tool_choice.name + "', which is not in 'tools'");
  }
  if ((r->tool_choice.mode == ToolChoice::Mode::kRequired || r->tool_choice.mode == ToolChoice::Mode::kNamed) &&
      r->constraint)
    return f.fail(r->constraint->param, "'" + r->constraint->param + "' cannot be combined with a tool_choice that forces a call");
}

// An assistant message's tool_calls with each function's arguments as the JSON value
// they hold: the API sends a string, templates print the object with tojson.
void normalize_tool_calls(ojson& msg, const std::string& where, Fields& f) {
  auto calls = msg.find("tool_calls");
  if (calls == msg.end() || calls->is_null()) return;
  if (!calls->is_array()) return f.fail(where + ".tool_calls", "'" + where + ".tool_calls' must be a list");
  for (size_t k = 0; k < calls->size(); ++k) {
    ojson& call = (*calls)[k];
    const std::string cw = where + ".tool_calls[" + std::to_string(k) + "]";
    auto fn = call.is_object() ? call.find("function") : call.end();
    if (fn == call.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
      return f.fail(cw, "'" + cw + "' must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
    auto args = fn->find("arguments");
    if (args != fn->end() && args->is_string() && nesting_depth(args->get_ref<const std::string&>()) <= kMaxNesting) {
      std::optional<ojson> parsed = parse_json(args->get_ref<const std::string&>());
      if (parsed) *args = std::move(*parsed);
    }
  }
}

}  // namespace

Parsed<CompletionRequest> parse_completion_request(const std::string& body) {
  Parsed<CompletionRequest> out;
  std::optional<ojson> j = parse_object(body, &out.error);
  if (!j) return out;
  Fields f(*j);
  CompletionRequest r;
  read_sampling(f, &r, /*chat=*/false);
  f.boolean("echo", &r.echo);
  f.integer("logprobs", &r.logprobs, 0, 20);
  f.boolean("add_special_tokens", &r.add_special_tokens);
  if (f.ok() && f.get("suffix"))
    f.fail("suffix", "'suffix' is not supported: loom's models complete text left to right (no fill-in-the-middle)");
  if (f.ok()) {
    const ojson* p = f.get("prompt");
    if (!p) {
      f.fail("prompt", "'prompt' is required");
    } else if (p->is_string()) {
      r.prompts.push_back({p->get<std::string>(), {}});
    } else if (p->is_array() && !p->empty() && (*p)[0].is_string()) {
      for (const ojson& v : *p) {
        if (!v.is_string()) {
          f.fail("prompt", "'prompt' mixes strings with other values: give strings, token ids or lists of token ids");
          break;
        }
        r.prompts.push_back({v.get<std::string>(), {}});
      }
    } else if (p->is_array() && !p->empty() && (*p)[0].is_array()) {
      for (const ojson& v : *p) {
        if (!v.is_array()) {
          f.fail("prompt", "'prompt' mixes lists of token ids with other values");
          break;
        }
        PromptInput in;
        if (!read_ids(v, "prompt", &in.ids, f)) break;
        if (in.ids.empty()) {
          f.fail("prompt", "'prompt' holds an empty list of token ids");
          break;
        }
        r.prompts.push_back(std::move(in));
      }
    } else if (p->is_array() && !p->empty()) {
      PromptInput in;
      if (read_ids(*p, "prompt", &in.ids, f)) r.prompts.push_back(std::move(in));
    } else if (p->is_array()) {
      f.fail("prompt", "'prompt' is an empty list");
    } else {
      f.fail("prompt", io::field_type_message(
                           "prompt", "a string, a list of strings, a list of token ids or a list of lists of token ids", *p));
    }
  }
  if (f.ok() && r.prompts.size() * static_cast<size_t>(r.n) > 1024)
    f.fail("prompt", "at most 1024 choices (prompts × n) per request");
  if (!f.ok()) {
    out.error = f.error();
    return out;
  }
  out.value = std::move(r);
  return out;
}

std::optional<ojson> parse_request_object(const std::string& body, ApiError* error) { return parse_object(body, error); }

Parsed<ChatCompletionRequest> parse_chat_completion_request(const std::string& body) {
  Parsed<ChatCompletionRequest> out;
  std::optional<ojson> j = parse_object(body, &out.error);
  if (!j) return out;
  return parse_chat_completion_object(*j);
}

Parsed<ChatCompletionRequest> parse_chat_completion_object(const ojson& body) {
  Parsed<ChatCompletionRequest> out;
  const ojson* j = &body;
  Fields f(*j);
  ChatCompletionRequest r;
  read_sampling(f, &r, /*chat=*/true);
  f.boolean("add_generation_prompt", &r.add_generation_prompt);
  f.boolean("logprobs", &r.logprobs);
  std::optional<int32_t> top;
  f.integer("top_logprobs", &top, 0, 20);
  if (top) r.top_logprobs = *top;
  f.boolean("add_special_tokens", &r.add_special_tokens);
  if (f.ok()) read_tools(f, &r);
  if (f.ok() && r.top_logprobs > 0 && !r.logprobs) f.fail("top_logprobs", "'top_logprobs' needs \"logprobs\": true");
  f.integer("max_thinking_tokens", &r.max_thinking_tokens, 0, std::numeric_limits<int32_t>::max());
  f.string("reasoning_effort", &r.reasoning_effort);
  if (f.ok() && r.reasoning_effort && !valid_reasoning_effort(*r.reasoning_effort))
    f.fail("reasoning_effort", "'reasoning_effort' must be \"none\", \"minimal\", \"low\", \"medium\" or \"high\", got \"" +
                                   *r.reasoning_effort + "\"");
  if (f.ok()) {
    if (const ojson* kw = f.get("chat_template_kwargs")) {
      if (!kw->is_object()) f.fail("chat_template_kwargs", io::field_type_message("chat_template_kwargs", "an object", *kw));
      else r.chat_template_kwargs = *kw;
    }
  }
  if (f.ok()) {
    const ojson* m = f.get("messages");
    if (!m) f.fail("messages", "'messages' is required");
    else if (!m->is_array()) f.fail("messages", io::field_type_message("messages", "a list", *m));
    else if (m->empty()) f.fail("messages", "'messages' is empty");
    r.messages = ojson::array();
    for (size_t i = 0; f.ok() && i < m->size(); ++i) {
      const std::string where = "messages[" + std::to_string(i) + "]";
      const ojson& msg = (*m)[i];
      if (!msg.is_object()) {
        f.fail(where, io::field_type_message(where, "an object", msg));
        break;
      }
      auto role = msg.find("role");
      if (role == msg.end() || !role->is_string()) {
        f.fail(where + ".role", "'" + where + ".role' must be a string");
        break;
      }
      ojson norm = msg;
      auto content = msg.find("content");
      if (content == msg.end() || content->is_null()) {
        norm["content"] = "";
      } else if (content->is_array()) {
        std::string joined;
        for (size_t k = 0; k < content->size(); ++k) {
          const ojson& part = (*content)[k];
          const std::string pw = where + ".content[" + std::to_string(k) + "]";
          if (part.is_string()) {
            joined += (joined.empty() ? "" : "\n") + part.get<std::string>();
            continue;
          }
          auto type = part.is_object() ? part.find("type") : part.end();
          if (!part.is_object() || type == part.end() || !type->is_string()) {
            f.fail(pw, "'" + pw + "' must be a content part with a \"type\"");
            break;
          }
          if (type->get<std::string>() != "text") {
            f.fail(pw, "'" + pw + "': content parts of type '" + type->get<std::string>() +
                           "' are not supported (only \"text\")");
            break;
          }
          auto text = part.find("text");
          if (text == part.end() || !text->is_string()) {
            f.fail(pw + ".text", "'" + pw + ".text' must be a string");
            break;
          }
          joined += (joined.empty() ? "" : "\n") + text->get<std::string>();
        }
        norm["content"] = joined;
      } else if (!content->is_string()) {
        f.fail(where + ".content", io::field_type_message(where + ".content", "a string or a list of content parts", *content));
        break;
      }
      normalize_tool_calls(norm, where, f);
      r.messages.push_back(std::move(norm));
    }
  }
  if (f.ok() && static_cast<size_t>(r.n) > 1024) f.fail("n", "'n' must be at most 1024");
  if (!f.ok()) {
    out.error = f.error();
    return out;
  }
  out.value = std::move(r);
  return out;
}

Parsed<TokenizeRequest> parse_tokenize_request(const std::string& body) {
  Parsed<TokenizeRequest> out;
  std::optional<ojson> j = parse_object(body, &out.error);
  if (!j) return out;
  Fields f(*j);
  TokenizeRequest r;
  f.string("model", &r.model);
  f.string("prompt", &r.prompt);
  f.boolean("add_generation_prompt", &r.add_generation_prompt);
  f.boolean("return_token_strs", &r.return_token_strs);
  bool special = false;
  if (f.get("add_special_tokens")) {
    f.boolean("add_special_tokens", &special);
    r.add_special_tokens = special;
  }
  if (f.ok() && f.get("messages")) {
    // Same validation as chat: reuse it on a minimal chat body.
    ojson chat = {{"messages", *f.get("messages")}};
    Parsed<ChatCompletionRequest> c = parse_chat_completion_request(chat.dump());
    if (!c.ok()) {
      out.error = c.error;
      return out;
    }
    r.messages = c.value->messages;
  }
  if (f.ok() && !r.prompt && !r.messages) f.fail("prompt", "give 'prompt' (a string) or 'messages'");
  if (f.ok() && r.prompt && r.messages) f.fail("messages", "give 'prompt' or 'messages', not both");
  if (!f.ok()) {
    out.error = f.error();
    return out;
  }
  out.value = std::move(r);
  return out;
}

Parsed<DetokenizeRequest> parse_detokenize_request(const std::string& body) {
  Parsed<DetokenizeRequest> out;
  std::optional<ojson> j = parse_object(body, &out.error);
  if (!j) return out;
  Fields f(*j);
  DetokenizeRequest r;
  f.string("model", &r.model);
  if (f.ok()) {
    const ojson* t = f.get("tokens");
    if (!t) f.fail("tokens", "'tokens' is required");
    else if (!t->is_array()) f.fail("tokens", io::field_type_message("tokens", "a list of token ids", *t));
    else read_ids(*t, "tokens", &r.tokens, f);
  }
  if (!f.ok()) {
    out.error = f.error();
    return out;
  }
  out.value = std::move(r);
  return out;
}

}  // namespace loom::serve
