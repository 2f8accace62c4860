// What the two generation routes share: request fields → RequestOptions, the
// context-length check, waiting for a job while watching the client, and the
// stream loop of server-sent events.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "serve/engine.h"
#include "serve/http.h"
#include "serve/protocol.h"

namespace loom::serve {

// Sampling, penalties, bias, seed and stop strings of the request; what it leaves
// unset takes the model's generation_config.json. A temperature of 0 means greedy.
batching::RequestOptions request_options(const SamplingFields& s);

// 400 when prompt + max_tokens exceed the context, naming both numbers.
std::optional<ApiError> check_context(const Engine& engine, int64_t prompt_tokens, int64_t max_tokens);
// 400 for prompt text over the byte budget, before it is tokenized.
std::optional<ApiError> check_prompt_bytes(const Engine& engine, size_t bytes, const std::string& param);

// Token ids checked against the vocabulary; `param` names the field in errors.
std::optional<ApiError> check_ids(const Engine& engine, const std::vector<int32_t>& ids, const std::string& param);

// Every choice's final output, in choice order; nullopt when the client went
// away (the job is then cancelled, and its blocks go back to the pool).
std::optional<std::vector<batching::GenerationOutput>> collect_job(Job& job, const HttpRequest& req);

// Runs a job's stream: calls on_output for every output (per-token snapshots,
// then the final one) until every choice ended, then writes the tail (usage)
// and "data: [DONE]". A failed choice becomes an error event. Cancels the job
// when the client goes away. Returns false in that case.
// How an API frames its stream's error event and its end (OpenAI's chat and
// completions: an {"error"} event and "data: [DONE]"; the Messages and Responses APIs
// their own error events and no end marker).
struct StreamFraming {
  std::function<std::string(const ApiError&)> error_event;
  std::string done = "data: [DONE]\n\n";
};
bool stream_job(Job& job, EventSink& sink, const std::function<bool(int32_t, const batching::GenerationOutput&)>& on_output,
                const std::function<void()>& on_end, const StreamFraming* framing = nullptr);

// One server-sent event with a name: "event: <name>\ndata: <json>\n\n".
std::string named_sse_event(const std::string& name, const nlohmann::ordered_json& data);

// What a request whose client left gets (nobody reads it): nginx's 499.
HttpResponse client_gone_response();

// OpenAI's usage object.
nlohmann::ordered_json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

// The response of a non-streamed job once every choice ended: the first failed
// choice's error, else {id, object, created, model, choices, usage} with each
// choice from `choice_json` (index added, and finish_reason unless it set one), and
// the log line's fields.
HttpResponse finished_response(const std::vector<batching::GenerationOutput>& finals, const HttpRequest& req,
                               const std::string& id, const char* object, const std::string& model,
                               int64_t prompt_tokens,
                               const std::function<nlohmann::ordered_json(size_t, const batching::GenerationOutput&)>& choice_json);

// The error object a failed final output turns into.
ApiError output_error(const batching::GenerationOutput& o);

// OpenAI's response id and "created" (Unix seconds).
std::string response_id(const std::string& prefix, const HttpRequest& req);
int64_t unix_now();

// Token text and its UTF-8 bytes for logprobs.
std::string token_text(const Engine& engine, int32_t id);
nlohmann::ordered_json utf8_bytes(const std::string& s);

}  // namespace loom::serve
