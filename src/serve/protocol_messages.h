// The request types of the two other chat-shaped APIs, each validated (errors name the
// field in the API's own terms) and translated into a ChatCompletionRequest, so a
// conversation is rendered, generated and parsed the one way (serve/chat_run.h):
//   - Anthropic Messages (POST /v1/messages, /v1/messages/count_tokens);
//   - OpenAI Responses (POST /v1/responses);
// and the rerank request (Jina / Cohere), which is not a chat.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "serve/protocol.h"

namespace loom::serve {

struct MessagesRequest {
  ChatCompletionRequest chat;
  std::vector<std::string> stop_sequences;
};

// count_tokens takes the same body without max_tokens.
Parsed<MessagesRequest> parse_messages_request(const std::string& body, bool count_tokens = false);

struct ResponsesRequest {
  ChatCompletionRequest chat;
  // The conversation in Responses items (input after previous_response_id's), to store.
  nlohmann::ordered_json input_messages;  // Chat Completions messages, instructions excluded
  std::optional<std::string> instructions;
  std::optional<std::string> previous_response_id;
  bool store = false;
  nlohmann::ordered_json echo;  // fields a Response object repeats (tools, tool_choice, text, …)
};

// previous_response_id is resolved by the route (it owns the store): `previous` is the
// stored conversation to put before this request's input, or null.
Parsed<ResponsesRequest> parse_responses_request(const std::string& body,
                                                 const std::function<std::optional<nlohmann::ordered_json>(const std::string&)>& previous);

// POST /v1/rerank (and /rerank, /v2/rerank): Jina's and Cohere's shape.
struct RerankRequest {
  std::optional<std::string> model;
  std::string query;
  std::vector<std::string> documents;  // strings, or {"text"} objects
  std::optional<int64_t> top_n;
  bool return_documents = true;
  std::optional<std::string> instruction;  // the <Instruct> of Qwen3-Reranker's prompt
};
Parsed<RerankRequest> parse_rerank_request(const std::string& body);
// vLLM's /score: {"text_1": query, "text_2": a document or a list} as a RerankRequest.
Parsed<RerankRequest> parse_score_request(const std::string& body);

// Anthropic's error shape: {"type": "error", "error": {"type", "message"}}, with the
// error type its HTTP status means in that API.
nlohmann::ordered_json anthropic_error_json(const ApiError& e);

}  // namespace loom::serve
