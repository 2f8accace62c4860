// The OpenAI (and vLLM) request types the routes accept, parsed and validated in
// one place: a field of the wrong type or out of its range is an ApiError that
// names it. Unknown fields are ignored, as the OpenAI API does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/api_error.h"
#include "serve/response_constraint.h"

namespace loom::serve {

// What /v1/completions and /v1/chat/completions share.
struct SamplingFields {
  std::optional<std::string> model;
  std::optional<int64_t> max_tokens;  // max_tokens, or chat's max_completion_tokens
  std::optional<float> temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
  std::optional<int32_t> top_k;  // 0 or -1: off
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Speculative decoding by prompt lookup for this request (the server's
  // --prompt-lookup-num-tokens when unset): the tokens are the same either way.
  std::optional<int64_t> prompt_lookup_num_tokens;
  // response_format / structured_outputs / guided_* (serve/response_constraint.h).
  std::optional<RequestedConstraint> constraint;
};

// One prompt of a completion request: text to tokenize, or token ids.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};

struct CompletionRequest : SamplingFields {
  std::vector<PromptInput> prompts;
  bool echo = false;
  std::optional<int32_t> logprobs;  // alternatives per token, 0..20
  bool add_special_tokens = true;
};

// tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name"}}.
struct ToolChoice {
  enum class Mode { kNone, kAuto, kRequired, kNamed };
  Mode mode = Mode::kNone;
  std::string name;  // kNamed
};

struct ChatCompletionRequest : SamplingFields {
  // [{"role", "content": string}, ...]: text parts of list contents joined by
  // newlines; other keys (name, tool_call_id, …) passed to the template as they are,
  // but an assistant's tool_calls[].function.arguments, a JSON string in OpenAI's
  // API, becomes the object it holds (templates print it with tojson).
  nlohmann::ordered_json messages;
  // [{"type": "function", "function": {"name", "description", "parameters"}}], or null.
  nlohmann::ordered_json tools;
  ToolChoice tool_choice;  // default: auto with tools, none without
  bool parallel_tool_calls = true;
  bool add_generation_prompt = true;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool add_special_tokens = false;  // the template writes the special tokens it wants
  // Reasoning models (serve/reasoning.h): a budget of thinking tokens, after which the
  // section is closed; or OpenAI's reasoning_effort ("none", "minimal", "low",
  // "medium", "high") mapped to one.
  std::optional<int64_t> max_thinking_tokens;
  std::optional<std::string> reasoning_effort;
};

// vLLM's /tokenize: a prompt, or chat messages rendered with the template.
struct TokenizeRequest {
  std::optional<std::string> model;
  std::optional<std::string> prompt;
  std::optional<nlohmann::ordered_json> messages;
  bool add_generation_prompt = true;
  std::optional<bool> add_special_tokens;  // default: true for a prompt, false for messages
  bool return_token_strs = false;
};

struct DetokenizeRequest {
  std::optional<std::string> model;
  std::vector<int32_t> tokens;
};

template <class T>
struct Parsed {
  std::optional<T> value;
  ApiError error;
  bool ok() const { return value.has_value(); }
};

// The body as a JSON object (nesting bounded), or the 400 that says why not.
std::optional<nlohmann::ordered_json> parse_request_object(const std::string& body, ApiError* error);

Parsed<CompletionRequest> parse_completion_request(const std::string& body);
// The same from a parsed body: what the Messages and Responses APIs translate theirs into.
Parsed<ChatCompletionRequest> parse_chat_completion_object(const nlohmann::ordered_json& body);
Parsed<ChatCompletionRequest> parse_chat_completion_request(const std::string& body);
Parsed<TokenizeRequest> parse_tokenize_request(const std::string& body);
Parsed<DetokenizeRequest> parse_detokenize_request(const std::string& body);

}  // namespace loom::serve
