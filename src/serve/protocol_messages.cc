#include "serve/protocol_messages.h"

#include <limits>

#include "loom/io/json_fields.h"

namespace loom::serve {

namespace {

using ojson = nlohmann::ordered_json;

std::string at(const std::string& where, size_t i) { return where + "[" + std::to_string(i) + "]"; }

// A string, or text blocks [{"type": "text", "text"}] joined by newlines.
std::optional<std::string> text_of(const ojson& v, const std::string& where, ApiError* error) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) {
    *error = bad_field(where, io::field_type_message(where, "a string or a list of text blocks", v));
    return std::nullopt;
  }
  std::string out;
  for (size_t k = 0; k < v.size(); ++k) {
    const ojson& b = v[k];
    if (!b.is_object() || b.value("type", ojson()) != "text" || !b.contains("text") || !b["text"].is_string()) {
      *error = bad_field(at(where, k), "'" + at(where, k) + "' must be a text block {\"type\": \"text\", \"text\": …}");
      return std::nullopt;
    }
    out += (out.empty() ? "" : "\n") + b["text"].get<std::string>();
  }
  return out;
}

// Copies a sampling field of the same meaning, if present.
void copy(const ojson& from, ojson& to, const char* key, const char* as = nullptr) {
  auto it = from.find(key);
  if (it != from.end() && !it->is_null()) to[as ? as : key] = *it;
}

// One Anthropic message as Chat Completions messages: a user turn's tool_result blocks
// become "tool" messages (in order, before its text), an assistant turn's tool_use
// blocks its tool_calls and its thinking block its reasoning_content.
bool translate_message(const ojson& m, const std::string& where, ojson& out, ApiError* error) {
  if (!m.is_object()) {
    *error = bad_field(where, io::field_type_message(where, "an object", m));
    return false;
  }
  const ojson role = m.value("role", ojson());
  if (role != "user" && role != "assistant") {
    *error = bad_field(where + ".role", "'" + where + ".role' must be \"user\" or \"assistant\"");
    return false;
  }
  auto content = m.find("content");
  if (content == m.end() || (!content->is_string() && !content->is_array())) {
    *error = bad_field(where + ".content", "'" + where + ".content' must be a string or a list of content blocks");
    return false;
  }
  if (content->is_string()) {
    out.push_back({{"role", role}, {"content", *content}});
    return true;
  }
  std::string text, thinking;
  ojson calls = ojson::array();
  for (size_t k = 0; k < content->size(); ++k) {
    const ojson& b = (*content)[k];
    const std::string bw = at(where + ".content", k);
    const ojson type = b.is_object() ? b.value("type", ojson()) : ojson();
    if (!type.is_string()) {
      *error = bad_field(bw, "'" + bw + "' must be a content block with a \"type\"");
      return false;
    }
    const std::string t = type.get<std::string>();
    if (t == "text") {
      if (!b.contains("text") || !b["text"].is_string()) {
        *error = bad_field(bw + ".text", "'" + bw + ".text' must be a string");
        return false;
      }
      text += (text.empty() ? "" : "\n") + b["text"].get<std::string>();
    } else if (t == "tool_use" && role == "assistant") {
      if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") || !b["name"].is_string() ||
          !b.contains("input") || !b["input"].is_object()) {
        *error = bad_field(bw, "'" + bw + "' must be {\"type\": \"tool_use\", \"id\", \"name\", \"input\": {…}}");
        return false;
      }
      calls.push_back({{"id", b["id"]}, {"type", "function"}, {"function", {{"name", b["name"]}, {"arguments", b["input"]}}}});
    } else if (t == "tool_result" && role == "user") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string()) {
        *error = bad_field(bw + ".tool_use_id", "'" + bw + ".tool_use_id' must be a string");
        return false;
      }
      std::string result;
      if (b.contains("content") && !b["content"].is_null()) {
        std::optional<std::string> r = text_of(b["content"], bw + ".content", error);
        if (!r) return false;
        result = *r;
      }
      out.push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
    } else if ((t == "thinking" || t == "redacted_thinking") && role == "assistant") {
      if (t == "thinking" && b.contains("thinking") && b["thinking"].is_string())
        thinking += b["thinking"].get<std::string>();
    } else {
      *error = bad_field(bw + ".type", "'" + bw + ".type': content blocks of type '" + t + "' are not supported in " +
                                           role.get<std::string>() + " turns (text, tool_use in assistant turns, "
                                           "tool_result in user turns, thinking)");
      return false;
    }
  }
  if (role == "user" && text.empty() && !out.empty() && out.back()["role"] == "tool") return true;
  ojson msg = {{"role", role}, {"content", text}};
  if (!thinking.empty()) msg["reasoning_content"] = thinking;
  if (!calls.empty()) msg["tool_calls"] = calls;
  out.push_back(std::move(msg));
  return true;
}

}  // namespace

Parsed<MessagesRequest> parse_messages_request(const std::string& body, bool count_tokens) {
  Parsed<MessagesRequest> out;
  std::optional<ojson> parsed = parse_request_object(body, &out.error);
  if (!parsed) return out;
  const ojson& j = *parsed;
  auto fail = [&](const std::string& param, const std::string& message) {
    out.error = bad_field(param, message);
    return out;
  };
  ojson chat = ojson::object();
  copy(j, chat, "model");
  if (!count_tokens) {
    if (!j.contains("max_tokens") || j["max_tokens"].is_null()) return fail("max_tokens", "'max_tokens' is required");
    copy(j, chat, "max_tokens");
  }
  copy(j, chat, "temperature");
  copy(j, chat, "top_p");
  copy(j, chat, "top_k");
  copy(j, chat, "stream");
  if (j.contains("temperature") && j["temperature"].is_number() && j["temperature"].get<double>() > 1)
    return fail("temperature", "'temperature' must be a number in [0, 1]");
  MessagesRequest r;
  if (auto s = j.find("stop_sequences"); s != j.end() && !s->is_null()) {
    if (!s->is_array()) return fail("stop_sequences", io::field_type_message("stop_sequences", "a list of strings", *s));
    for (const ojson& v : *s) {
      if (!v.is_string() || v.get<std::string>().empty())
        return fail("stop_sequences", "'stop_sequences' must hold non-empty strings");
      r.stop_sequences.push_back(v.get<std::string>());
    }
    if (!s->empty()) chat["stop"] = *s;
  }

  ojson messages = ojson::array();
  if (auto sys = j.find("system"); sys != j.end() && !sys->is_null()) {
    std::optional<std::string> text = text_of(*sys, "system", &out.error);
    if (!text) return out;
    messages.push_back({{"role", "system"}, {"content", *text}});
  }
  auto m = j.find("messages");
  if (m == j.end() || m->is_null()) return fail("messages", "'messages' is required");
  if (!m->is_array()) return fail("messages", io::field_type_message("messages", "a list", *m));
  if (m->empty()) return fail("messages", "'messages' is empty");
  for (size_t i = 0; i < m->size(); ++i)
    if (!translate_message((*m)[i], at("messages", i), messages, &out.error)) return out;
  if (m->back().value("role", ojson()) == "assistant")
    return fail("messages", "the last message is the assistant's: prefilling the reply is not supported, end with a user turn");
  chat["messages"] = std::move(messages);

  if (auto tools = j.find("tools"); tools != j.end() && !tools->is_null()) {
    if (!tools->is_array()) return fail("tools", io::field_type_message("tools", "a list", *tools));
    ojson list = ojson::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const ojson& t = (*tools)[i];
      const std::string tw = at("tools", i);
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
        return fail(tw, "'" + tw + "' must be {\"name\", \"description\", \"input_schema\"}");
      if (t.contains("type") && !t["type"].is_null() && t["type"] != "custom")
        return fail(tw + ".type", "'" + tw + ".type': only custom tools (name, description, input_schema) are supported");
      ojson fn = {{"name", t["name"]}};
      copy(t, fn, "description");
      copy(t, fn, "input_schema", "parameters");
      list.push_back({{"type", "function"}, {"function", fn}});
    }
    if (!list.empty()) chat["tools"] = list;
  }
  if (auto tc = j.find("tool_choice"); tc != j.end() && !tc->is_null()) {
    const ojson type = tc->is_object() ? tc->value("type", ojson()) : ojson();
    if (type == "auto") chat["tool_choice"] = "auto";
    else if (type == "any") chat["tool_choice"] = "required";
    else if (type == "none") chat["tool_choice"] = "none";
    else if (type == "tool" && tc->contains("name") && (*tc)["name"].is_string())
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*tc)["name"]}}}};
    else
      return fail("tool_choice", "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\"}");
    if (tc->contains("disable_parallel_tool_use") && (*tc)["disable_parallel_tool_use"] == true)
      chat["parallel_tool_calls"] = false;
  }
  if (auto th = j.find("thinking"); th != j.end() && !th->is_null()) {
    const ojson type = th->is_object() ? th->value("type", ojson()) : ojson();
    if (type == "enabled") {
      auto budget = th->find("budget_tokens");
      if (budget == th->end() || !budget->is_number_integer() || budget->get<int64_t>() < 0)
        return fail("thinking.budget_tokens", "'thinking.budget_tokens' must be a non-negative integer");
      chat["max_thinking_tokens"] = *budget;
      if (!chat.contains("chat_template_kwargs")) chat["chat_template_kwargs"] = ojson::object();
      chat["chat_template_kwargs"]["enable_thinking"] = true;
    } else if (type == "disabled") {
      if (!chat.contains("chat_template_kwargs")) chat["chat_template_kwargs"] = ojson::object();
      chat["chat_template_kwargs"]["enable_thinking"] = false;
    } else {
      return fail("thinking", "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\"} or {\"type\": \"disabled\"}");
    }
  }
  Parsed<ChatCompletionRequest> c = parse_chat_completion_object(chat);
  if (!c.ok()) {
    out.error = c.error;
    if (out.error.param == "stop") out.error.param = "stop_sequences";
    return out;
  }
  r.chat = std::move(*c.value);
  out.value = std::move(r);
  return out;
}

ojson anthropic_error_json(const ApiError& e) {
  const char* type = "api_error";
  switch (e.status) {
    case 400: case 405: case 408: case 411: case 414: case 422: case 431: type = "invalid_request_error"; break;
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: case 529: type = "overloaded_error"; break;
    default: break;
  }
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
}

}  // namespace loom::serve

namespace loom::serve {

namespace {

// Responses message content: a string, or parts {"type": "input_text" | "output_text", "text"}.
std::optional<std::string> responses_text(const ojson& c, const std::string& where, ApiError* error) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) {
    *error = bad_field(where, io::field_type_message(where, "a string or a list of content parts", c));
    return std::nullopt;
  }
  std::string out;
  for (size_t k = 0; k < c.size(); ++k) {
    const ojson& p = c[k];
    const std::string pw = at(where, k);
    const ojson type = p.is_object() ? p.value("type", ojson()) : ojson();
    if (type != "input_text" && type != "output_text" && type != "text") {
      *error = bad_field(pw, "'" + pw + "': only text content parts (input_text, output_text) are supported");
      return std::nullopt;
    }
    if (!p.contains("text") || !p["text"].is_string()) {
      *error = bad_field(pw + ".text", "'" + pw + ".text' must be a string");
      return std::nullopt;
    }
    out += (out.empty() ? "" : "\n") + p["text"].get<std::string>();
  }
  return out;
}

bool responses_input(const ojson& input, ojson& messages, ApiError* error) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return true;
  }
  if (!input.is_array()) {
    *error = bad_field("input", io::field_type_message("input", "a string or a list of items", input));
    return false;
  }
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& item = input[i];
    const std::string iw = at("input", i);
    if (!item.is_object()) {
      *error = bad_field(iw, io::field_type_message(iw, "an object", item));
      return false;
    }
    const ojson type = item.value("type", ojson("message"));
    if (type == "message") {
      const ojson role = item.value("role", ojson());
      if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
        *error = bad_field(iw + ".role", "'" + iw + ".role' must be \"user\", \"assistant\", \"system\" or \"developer\"");
        return false;
      }
      if (!item.contains("content")) {
        *error = bad_field(iw + ".content", "'" + iw + ".content' is required");
        return false;
      }
      std::optional<std::string> text = responses_text(item["content"], iw + ".content", error);
      if (!text) return false;
      messages.push_back({{"role", role == "developer" ? ojson("system") : role}, {"content", *text}});
    } else if (type == "function_call") {
      if (!item.contains("call_id") || !item["call_id"].is_string() || !item.contains("name") || !item["name"].is_string() ||
          !item.contains("arguments") || !item["arguments"].is_string()) {
        *error = bad_field(iw, "'" + iw + "' must be {\"type\": \"function_call\", \"call_id\", \"name\", \"arguments\": string}");
        return false;
      }
      ojson call = {{"id", item["call_id"]}, {"type", "function"},
                    {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
      // Calls in a row are one assistant turn.
      if (messages.empty() || messages.back()["role"] != "assistant" || !messages.back().contains("tool_calls"))
        messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", ojson::array()}});
      messages.back()["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string() || !item.contains("output")) {
        *error = bad_field(iw, "'" + iw + "' must be {\"type\": \"function_call_output\", \"call_id\", \"output\"}");
        return false;
      }
      std::optional<std::string> out = responses_text(item["output"], iw + ".output", error);
      if (!out) return false;
      messages.push_back({{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", *out}});
    } else if (type == "reasoning") {
      continue;  // a previous reply's reasoning: templates drop it from history
    } else {
      *error = bad_field(iw + ".type", "'" + iw + ".type': input items of type " + type.dump() +
                                           " are not supported (message, function_call, function_call_output, reasoning)");
      return false;
    }
  }
  return true;
}

}  // namespace

Parsed<ResponsesRequest> parse_responses_request(
    const std::string& body, const std::function<std::optional<ojson>(const std::string&)>& previous) {
  Parsed<ResponsesRequest> out;
  std::optional<ojson> parsed = parse_request_object(body, &out.error);
  if (!parsed) return out;
  const ojson& j = *parsed;
  auto fail = [&](const std::string& param, const std::string& message) {
    out.error = bad_field(param, message);
    return out;
  };
  ResponsesRequest r;
  ojson chat = ojson::object();
  copy(j, chat, "model");
  copy(j, chat, "max_output_tokens", "max_tokens");
  copy(j, chat, "temperature");
  copy(j, chat, "top_p");
  copy(j, chat, "stream");
  copy(j, chat, "parallel_tool_calls");
  if (auto s = j.find("store"); s != j.end() && !s->is_null()) {
    if (!s->is_boolean()) return fail("store", io::field_type_message("store", "true or false", *s));
    r.store = s->get<bool>();
  }
  ojson messages = ojson::array();
  if (auto ins = j.find("instructions"); ins != j.end() && !ins->is_null()) {
    if (!ins->is_string()) return fail("instructions", io::field_type_message("instructions", "a string", *ins));
    r.instructions = ins->get<std::string>();
    messages.push_back({{"role", "system"}, {"content", *r.instructions}});
  }
  ojson history = ojson::array();
  if (auto prev = j.find("previous_response_id"); prev != j.end() && !prev->is_null()) {
    if (!prev->is_string()) return fail("previous_response_id", io::field_type_message("previous_response_id", "a string", *prev));
    r.previous_response_id = prev->get<std::string>();
    std::optional<ojson> stored = previous(*r.previous_response_id);
    if (!stored) {
      out.error = bad_field("previous_response_id", "Previous response with id '" + *r.previous_response_id +
                                                        "' not found (only responses created with \"store\": true are kept, "
                                                        "in memory, a bounded number)");
      out.error.status = 404;
      out.error.code = "previous_response_not_found";
      return out;
    }
    history = std::move(*stored);
  }
  auto input = j.find("input");
  if (input == j.end() || input->is_null()) return fail("input", "'input' is required");
  ojson fresh = ojson::array();
  if (!responses_input(*input, fresh, &out.error)) return out;
  r.input_messages = history;
  for (const ojson& m : fresh) r.input_messages.push_back(m);
  for (const ojson& m : r.input_messages) messages.push_back(m);
  if (messages.empty()) return fail("input", "'input' is empty");
  chat["messages"] = std::move(messages);

  if (auto tools = j.find("tools"); tools != j.end() && !tools->is_null()) {
    if (!tools->is_array()) return fail("tools", io::field_type_message("tools", "a list", *tools));
    ojson list = ojson::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const ojson& t = (*tools)[i];
      const std::string tw = at("tools", i);
      if (!t.is_object() || t.value("type", ojson()) != "function")
        return fail(tw + ".type", "'" + tw + ".type' must be \"function\" (the only tool type supported)");
      ojson fn = ojson::object();
      copy(t, fn, "name");
      copy(t, fn, "description");
      copy(t, fn, "parameters");
      copy(t, fn, "strict");
      list.push_back({{"type", "function"}, {"function", fn}});
    }
    if (!list.empty()) chat["tools"] = list;
  }
  if (auto tc = j.find("tool_choice"); tc != j.end() && !tc->is_null()) {
    if (tc->is_string()) {
      chat["tool_choice"] = *tc;
    } else if (tc->is_object() && tc->value("type", ojson()) == "function" && tc->contains("name")) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*tc)["name"]}}}};
    } else {
      return fail("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\"}");
    }
  }
  if (auto text = j.find("text"); text != j.end() && !text->is_null()) {
    if (!text->is_object()) return fail("text", io::field_type_message("text", "an object", *text));
    if (auto fmt = text->find("format"); fmt != text->end() && !fmt->is_null()) {
      const ojson type = fmt->is_object() ? fmt->value("type", ojson()) : ojson();
      if (type == "text") {
      } else if (type == "json_object") {
        chat["response_format"] = {{"type", "json_object"}};
      } else if (type == "json_schema") {
        ojson js = ojson::object();
        copy(*fmt, js, "name");
        copy(*fmt, js, "schema");
        copy(*fmt, js, "strict");
        chat["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
      } else {
        return fail("text.format.type", "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\"");
      }
    }
  }
  if (auto rs = j.find("reasoning"); rs != j.end() && !rs->is_null()) {
    if (!rs->is_object()) return fail("reasoning", io::field_type_message("reasoning", "an object", *rs));
    copy(*rs, chat, "effort", "reasoning_effort");
  }
  Parsed<ChatCompletionRequest> c = parse_chat_completion_object(chat);
  if (!c.ok()) {
    out.error = c.error;
    const std::string& p = out.error.param;
    if (p == "max_tokens") out.error.param = "max_output_tokens";
    else if (p.rfind("response_format", 0) == 0) out.error.param = "text.format";
    else if (p == "reasoning_effort") out.error.param = "reasoning.effort";
    else if (p.rfind("messages", 0) == 0) out.error.param = "input";
    return out;
  }
  r.chat = std::move(*c.value);
  r.echo = ojson::object();
  for (const char* k : {"tools", "tool_choice", "text", "temperature", "top_p", "parallel_tool_calls", "reasoning",
                        "metadata", "max_output_tokens"})
    if (auto it = j.find(k); it != j.end()) r.echo[k] = *it;
  out.value = std::move(r);
  return out;
}

}  // namespace loom::serve

namespace loom::serve {

Parsed<RerankRequest> parse_rerank_request(const std::string& body) {
  Parsed<RerankRequest> out;
  std::optional<ojson> parsed = parse_request_object(body, &out.error);
  if (!parsed) return out;
  const ojson& j = *parsed;
  auto fail = [&](const std::string& param, const std::string& message) {
    out.error = bad_field(param, message);
    return out;
  };
  RerankRequest r;
  if (auto m = j.find("model"); m != j.end() && !m->is_null()) {
    if (!m->is_string()) return fail("model", io::field_type_message("model", "a string", *m));
    r.model = m->get<std::string>();
  }
  auto q = j.find("query");
  if (q == j.end() || !q->is_string()) return fail("query", "'query' must be a string");
  r.query = q->get<std::string>();
  auto docs = j.find("documents");
  if (docs == j.end() || !docs->is_array() || docs->empty())
    return fail("documents", "'documents' must be a non-empty list of strings (or {\"text\"} objects)");
  if (docs->size() > 1024) return fail("documents", "at most 1024 documents per request");
  for (size_t i = 0; i < docs->size(); ++i) {
    const ojson& d = (*docs)[i];
    if (d.is_string()) r.documents.push_back(d.get<std::string>());
    else if (d.is_object() && d.contains("text") && d["text"].is_string()) r.documents.push_back(d["text"].get<std::string>());
    else return fail(at("documents", i), "'" + at("documents", i) + "' must be a string or {\"text\": string}");
  }
  if (auto n = j.find("top_n"); n != j.end() && !n->is_null()) {
    if (!n->is_number_integer() || n->get<int64_t>() < 1) return fail("top_n", "'top_n' must be a positive integer");
    r.top_n = n->get<int64_t>();
  }
  if (auto rd = j.find("return_documents"); rd != j.end() && !rd->is_null()) {
    if (!rd->is_boolean()) return fail("return_documents", io::field_type_message("return_documents", "true or false", *rd));
    r.return_documents = rd->get<bool>();
  }
  if (auto ins = j.find("instruction"); ins != j.end() && !ins->is_null()) {
    if (!ins->is_string()) return fail("instruction", io::field_type_message("instruction", "a string", *ins));
    r.instruction = ins->get<std::string>();
  }
  out.value = std::move(r);
  return out;
}

Parsed<RerankRequest> parse_score_request(const std::string& body) {
  Parsed<RerankRequest> out;
  std::optional<ojson> parsed = parse_request_object(body, &out.error);
  if (!parsed) return out;
  const ojson& j = *parsed;
  RerankRequest r;
  if (auto m = j.find("model"); m != j.end() && !m->is_null()) {
    if (!m->is_string()) {
      out.error = bad_field("model", io::field_type_message("model", "a string", *m));
      return out;
    }
    r.model = m->get<std::string>();
  }
  auto t1 = j.find("text_1");
  if (t1 == j.end() || !t1->is_string()) {
    out.error = bad_field("text_1", "'text_1' must be a string (the query)");
    return out;
  }
  r.query = t1->get<std::string>();
  auto t2 = j.find("text_2");
  if (t2 != j.end() && t2->is_string()) {
    r.documents.push_back(t2->get<std::string>());
  } else if (t2 != j.end() && t2->is_array() && !t2->empty() && t2->size() <= 1024) {
    for (size_t i = 0; i < t2->size(); ++i) {
      if (!(*t2)[i].is_string()) {
        out.error = bad_field(at("text_2", i), "'" + at("text_2", i) + "' must be a string");
        return out;
      }
      r.documents.push_back((*t2)[i].get<std::string>());
    }
  } else {
    out.error = bad_field("text_2", "'text_2' must be a string or a list of 1 to 1024 strings");
    return out;
  }
  out.value = std::move(r);
  return out;
}

}  // namespace loom::serve
