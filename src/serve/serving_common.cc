#include "serve/serving_common.h"

#include <chrono>

namespace loom::serve {

using json = nlohmann::ordered_json;

HttpResponse json_response(const json& body, int status) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r = json_response(e.to_json(), e.status);
  r.log->outcome = e.type;
  if (e.status == 429) r.headers.emplace_back("Retry-After", "1");
  if (e.status == 503) r.headers.emplace_back("Retry-After", "5");
  return r;
}

std::string sse_event(const json& data) {
  return "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

batching::RequestOptions request_options(const SamplingFields& s) {
  batching::RequestOptions o;
  if (s.temperature) {
    o.temperature = *s.temperature;
    o.do_sample = *s.temperature > 0;
  }
  if (s.top_p) o.top_p = *s.top_p;
  if (s.top_k) o.top_k = *s.top_k < 0 ? 0 : *s.top_k;
  if (s.min_p) o.min_p = *s.min_p;
  if (s.repetition_penalty) o.repetition_penalty = *s.repetition_penalty;
  if (s.presence_penalty) o.presence_penalty = *s.presence_penalty;
  if (s.frequency_penalty) o.frequency_penalty = *s.frequency_penalty;
  o.logit_bias = s.logit_bias;
  o.seed = s.seed;
  o.stop_strings = s.stop;
  o.prompt_lookup_num_tokens = s.prompt_lookup_num_tokens;
  return o;
}

std::optional<ApiError> check_prompt_bytes(const Engine& engine, size_t bytes, const std::string& param) {
  const size_t limit = engine.max_prompt_bytes();
  if (bytes <= limit) return std::nullopt;
  ApiError e = bad_field(param, "'" + param + "' is " + std::to_string(bytes) + " bytes of text, more than the " +
                                    std::to_string(limit) + " a prompt may have (--max-prompt-bytes; by default 64 bytes " +
                                    "per token of the " + std::to_string(engine.max_model_len()) + "-token context)");
  e.code = "prompt_too_large";
  return e;
}

std::optional<ApiError> check_context(const Engine& engine, int64_t prompt_tokens, int64_t max_tokens) {
  const int64_t limit = engine.max_model_len();
  if (prompt_tokens + max_tokens <= limit) return std::nullopt;
  ApiError e;
  e.param = prompt_tokens >= limit ? "prompt" : "max_tokens";
  e.code = "context_length_exceeded";
  e.message = "This model's maximum context length is " + std::to_string(limit) + " tokens. However, you requested " +
              std::to_string(prompt_tokens + max_tokens) + " tokens (" + std::to_string(prompt_tokens) +
              " in the prompt, " + std::to_string(max_tokens) +
              " for the completion). Please reduce the prompt or the completion length.";
  return e;
}

std::optional<ApiError> check_ids(const Engine& engine, const std::vector<int32_t>& ids, const std::string& param) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= engine.vocab_size())
      return bad_field(param, "token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) + " of '" +
                                  param + "' is outside the vocabulary [0, " + std::to_string(engine.vocab_size()) + ")");
  return std::nullopt;
}

ApiError output_error(const batching::GenerationOutput& o) {
  if (o.cancelled()) {
    ApiError e;
    e.status = 503;
    e.type = "service_unavailable";
    e.message = "the request was cancelled before it completed (" + o.error + ")";
    return e;
  }
  if (o.error_code == ErrorCode::kResourceExhausted) {
    // Inside the batch this means the request can never fit (the KV pool, or
    // max_blocks_per_request): retrying will not help, unlike a full queue.
    ApiError e = bad_field("max_tokens", o.error);
    e.code = "kv_cache_too_small";
    return e;
  }
  return from_status(Status(o.error_code == ErrorCode::kOk ? ErrorCode::kInternal : o.error_code, o.error));
}

namespace {
// Waits for the rest of a cancelled job's final outputs, so no handler still
// refers to it and its blocks are back in the pool.
void drain(Job& job) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!job.done() && std::chrono::steady_clock::now() < until) (void)job.next(0.05);
}
}  // namespace

std::optional<std::vector<batching::GenerationOutput>> collect_job(Job& job, const HttpRequest& req) {
  std::vector<batching::GenerationOutput> finals(static_cast<size_t>(job.num_choices()));
  while (!job.done()) {
    std::optional<Job::Event> e = job.next(0.05);
    if (!e) {
      if (!req.client_connected()) {
        job.cancel();
        drain(job);
        return std::nullopt;
      }
      continue;
    }
    if (e->output.is_final() && e->choice >= 0 && e->choice < job.num_choices())
      finals[static_cast<size_t>(e->choice)] = std::move(e->output);
  }
  return finals;
}

std::string named_sse_event(const std::string& name, const json& data) {
  return "event: " + name + "\n" + sse_event(data);
}

bool stream_job(Job& job, EventSink& sink, const std::function<bool(int32_t, const batching::GenerationOutput&)>& on_output,
                const std::function<void()>& on_end, const StreamFraming* framing) {
  bool failed = false;
  while (!job.done()) {
    std::optional<Job::Event> e = job.next(0.05);
    if (!e) {
      if (!sink.connected()) {
        job.cancel();
        drain(job);
        return false;
      }
      continue;
    }
    const batching::GenerationOutput& o = e->output;
    if (o.status == batching::RequestStatus::kFailed) {
      if (failed) continue;  // one error event per stream
      failed = true;
      job.cancel();
      const ApiError err = output_error(o);
      if (!sink.write(framing && framing->error_event ? framing->error_event(err) : sse_event(err.to_json()))) {
        drain(job);
        return false;
      }
      continue;
    }
    if (failed) continue;
    if (!on_output(e->choice, o)) {
      job.cancel();
      drain(job);
      return false;
    }
  }
  if (!failed) on_end();
  const std::string done = framing ? framing->done : "data: [DONE]\n\n";
  return done.empty() ? sink.connected() : sink.write(done);
}

HttpResponse client_gone_response() {
  HttpResponse res;
  res.status = 499;
  res.log->outcome = "client disconnected";
  return res;
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

HttpResponse finished_response(const std::vector<batching::GenerationOutput>& finals, const HttpRequest& req,
                               const std::string& id, const char* object, const std::string& model,
                               int64_t prompt_tokens,
                               const std::function<json(size_t, const batching::GenerationOutput&)>& choice_json) {
  json choices = json::array();
  int64_t completion = 0;
  double ttft = -1;
  std::string reasons;
  for (size_t c = 0; c < finals.size(); ++c) {
    const batching::GenerationOutput& out = finals[c];
    if (out.status != batching::RequestStatus::kFinished) return error_response(output_error(out));
    completion += static_cast<int64_t>(out.generated_tokens.size());
    if (!out.timestamps.empty() && (ttft < 0 || out.timestamps[0] - req.received_time < ttft))
      ttft = out.timestamps[0] - req.received_time;
    const char* reason = finish_reason_label(out);
    if (reasons.find(reason) == std::string::npos) reasons += (reasons.empty() ? "" : ",") + std::string(reason);
    json choice = {{"index", c}};  // OpenAI's field order
    const json fields = choice_json(c, out);
    for (const auto& [k, v] : fields.items()) choice[k] = v;
    if (!choice.contains("finish_reason")) choice["finish_reason"] = reason;  // chat's tool_calls sets its own
    choices.push_back(std::move(choice));
  }
  HttpResponse res = json_response({{"id", id},
                                    {"object", object},
                                    {"created", unix_now()},
                                    {"model", model},
                                    {"choices", choices},
                                    {"usage", usage_json(prompt_tokens, completion)}});
  res.log->prompt_tokens = prompt_tokens;
  res.log->completion_tokens = completion;
  res.log->ttft_seconds = ttft;
  res.log->outcome = reasons;
  return res;
}

std::string response_id(const std::string& prefix, const HttpRequest& req) { return prefix + "-" + req.request_id; }

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string token_text(const Engine& engine, int32_t id) {
  if (!engine.tokenizer()) return std::to_string(id);
  Result<std::string> s = engine.tokenizer()->decode({id}, /*skip_special_tokens=*/false);
  return s.ok() ? *s : std::string();
}

json utf8_bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace loom::serve
