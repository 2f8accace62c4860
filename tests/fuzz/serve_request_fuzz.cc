// The server's request bodies from the fuzzer: each of the parsers (OpenAI's
// completions, chat, tokenize, detokenize, Responses; Anthropic's Messages; rerank, score) must
// accept the bytes or name what is wrong, and what they accept must hold the
// ranges the routes rely on; the error object must always serialize.
#include <cstdlib>
#include <string>

#include "fuzz_util.h"
#include "serve/protocol.h"
#include "serve/protocol_messages.h"

namespace {

void check_sampling(const loom::serve::SamplingFields& s) {
  if (s.n < 1 || s.n > 128) std::abort();
  if (s.max_tokens && *s.max_tokens < 1) std::abort();
  if (s.temperature && !(*s.temperature >= 0 && *s.temperature <= 2)) std::abort();
  if (s.top_p && !(*s.top_p > 0 && *s.top_p <= 1)) std::abort();
  for (const auto& [id, bias] : s.logit_bias)
    if (id < 0 || !(bias >= -100 && bias <= 100)) std::abort();
  for (const std::string& stop : s.stop)
    if (stop.empty()) std::abort();
  if (s.include_usage && !s.stream) std::abort();
}

void check_error(const loom::serve::ApiError& e) {
  if (e.status < 400 || e.message.empty()) std::abort();
  (void)e.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  (void)loom::serve::anthropic_error_json(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A chat request as the routes take it: messages with string roles and contents.
void check_chat(const loom::serve::ChatCompletionRequest& c) {
  check_sampling(c);
  if (!c.messages.is_array() || c.messages.empty()) std::abort();
  for (const auto& m : c.messages)
    if (!m["role"].is_string() || !m["content"].is_string()) std::abort();
  if (c.max_thinking_tokens && *c.max_thinking_tokens < 0) std::abort();
  (void)c.messages.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(loom::fuzz::as_text(data, size));
  using namespace loom::serve;
  if (auto c = parse_completion_request(body); c.ok()) {
    check_sampling(*c.value);
    if (c.value->prompts.empty()) std::abort();
    for (const PromptInput& p : c.value->prompts)
      if (!p.text && p.ids.empty()) std::abort();
    if (c.value->logprobs && (*c.value->logprobs < 0 || *c.value->logprobs > 20)) std::abort();
  } else {
    check_error(c.error);
  }
  if (auto c = parse_chat_completion_request(body); c.ok()) {
    check_sampling(*c.value);
    if (!c.value->messages.is_array() || c.value->messages.empty()) std::abort();
    for (const auto& m : c.value->messages)
      if (!m["role"].is_string() || !m["content"].is_string()) std::abort();
    (void)c.value->messages.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  } else {
    check_error(c.error);
  }
  for (const bool count : {false, true}) {
    if (auto m = parse_messages_request(body, count); m.ok()) {
      check_chat(m.value->chat);
      if (!count && !m.value->chat.max_tokens) std::abort();
    } else {
      check_error(m.error);
    }
  }
  const auto previous = [](const std::string& id) -> std::optional<nlohmann::ordered_json> {
    if (id != "resp_1") return std::nullopt;
    return nlohmann::ordered_json::array({{{"role", "user"}, {"content", "a"}}, {{"role", "assistant"}, {"content", "b"}}});
  };
  if (auto r = parse_responses_request(body, previous); r.ok()) {
    check_chat(r.value->chat);
    if (!r.value->input_messages.is_array() || r.value->chat.n != 1) std::abort();
  } else {
    check_error(r.error);
  }
  if (auto k = parse_rerank_request(body); k.ok()) {
    if (k.value->documents.empty() || k.value->documents.size() > 1024 || (k.value->top_n && *k.value->top_n < 1)) std::abort();
  } else {
    check_error(k.error);
  }
  if (auto k = parse_score_request(body); k.ok()) {
    if (k.value->documents.empty() || k.value->documents.size() > 1024) std::abort();
  } else {
    check_error(k.error);
  }
  if (auto t = parse_tokenize_request(body); t.ok()) {
    if (t.value->prompt.has_value() == t.value->messages.has_value()) std::abort();
  } else {
    check_error(t.error);
  }
  if (auto d = parse_detokenize_request(body); !d.ok()) check_error(d.error);
  return 0;
}
