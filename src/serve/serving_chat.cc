// POST /v1/chat/completions: messages rendered with the checkpoint's chat
// template (as Transformers' apply_chat_template), then generated like a
// completion; chat.completion objects, or chat.completion.chunk events.
#include <algorithm>
#include <memory>

#include "serve/routes.h"
#include "serve/serving_common.h"
#include "serve/chat_run.h"
#include "serve/tool_calls.h"

namespace loom::serve {

namespace {

using json = nlohmann::ordered_json;

json chat_logprob(const Engine& e, int32_t id, float lp, const std::vector<generation::TokenLogprob>* top) {
  const std::string text = token_text(e, id);
  json alternatives = json::array();
  if (top)
    for (const generation::TokenLogprob& t : *top) {
      const std::string s = token_text(e, t.id);
      alternatives.push_back({{"token", s}, {"logprob", t.logprob}, {"bytes", utf8_bytes(s)}});
    }
  return {{"token", text}, {"logprob", lp}, {"bytes", utf8_bytes(text)}, {"top_logprobs", alternatives}};
}

json chat_logprobs(const Engine& e, const batching::GenerationOutput& o, size_t begin, size_t end) {
  json content = json::array();
  for (size_t i = begin; i < end && i < o.generated_tokens.size() && i < o.logprobs.size(); ++i)
    content.push_back(chat_logprob(e, o.generated_tokens[i], o.logprobs[i], i < o.top_logprobs.size() ? &o.top_logprobs[i] : nullptr));
  return {{"content", content}};
}

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls)
    out.push_back({{"id", new_call_id()}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

}  // namespace

HttpResponse handle_chat_completions(Engine& engine, const HttpRequest& req) {
  Parsed<ChatCompletionRequest> parsed = parse_chat_completion_request(req.body);
  if (!parsed.ok()) return error_response(parsed.error);
  const ChatCompletionRequest& r = *parsed.value;
  auto run = std::make_shared<ChatRun>();
  if (auto e = start_chat(engine, r, req, run.get())) return error_response(*e);
  std::shared_ptr<Job> job = run->job;
  const int64_t prompt_tokens = run->prompt_tokens;
  const std::string id = response_id("chatcmpl", req);
  const int64_t created = unix_now();
  const std::string model = engine.served_model_name();
  auto usage = [prompt_tokens](int64_t completion) { return usage_json(prompt_tokens, completion); };

  if (!r.stream) {
    std::optional<std::vector<batching::GenerationOutput>> finals = collect_job(*job, req);
    if (!finals) return client_gone_response();
    return finished_response(*finals, req, id, "chat.completion", model, prompt_tokens,
                             [&](size_t, const batching::GenerationOutput& out) {
                               ReplyParts reply = parse_reply(*run, out.text, true);
                               json message = {{"role", "assistant"},
                                               {"content", reply.content ? json(*reply.content) : json(nullptr)}};
                               // vLLM's field, for templates that think: null when the reply did not.
                               if (run->reasoning.thinks())
                                 message["reasoning_content"] = reply.reasoned ? json(reply.reasoning) : json(nullptr);
                               if (!reply.calls.empty()) message["tool_calls"] = tool_calls_json(reply.calls);
                               json fields = {{"message", std::move(message)},
                                              {"logprobs", r.logprobs ? chat_logprobs(engine, out, 0, out.generated_tokens.size())
                                                                      : json(nullptr)}};
                               if (!reply.calls.empty() && std::string(finish_reason_label(out)) == "stop")
                                 fields["finish_reason"] = "tool_calls";
                               return fields;
                             });
  }

  HttpResponse res;
  res.content_type = "text/event-stream";
  res.log->prompt_tokens = prompt_tokens;
  std::shared_ptr<RequestLog> log = res.log;
  const bool include_usage = r.include_usage;
  const bool want_logprobs = r.logprobs;
  res.stream = [&engine, run, job, id, created, model, include_usage, want_logprobs, usage, log,
                received = req.received_time](EventSink& sink) {
    struct ChoiceState {
      ReplyStream reply;
      size_t tokens_sent = 0;
    };
    std::vector<ChoiceState> state(static_cast<size_t>(job->num_choices()));
    int64_t completion = 0;
    auto chunk = [&](json choice) {
      return sse_event({{"id", id},
                        {"object", "chat.completion.chunk"},
                        {"created", created},
                        {"model", model},
                        {"choices", json::array({std::move(choice)})}});
    };
    // The role comes first, once per choice, as OpenAI sends it.
    for (int32_t c = 0; c < job->num_choices(); ++c)
      if (!sink.write(chunk({{"index", c}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                             {"finish_reason", nullptr}}))) {
        job->cancel();
        break;
      }
    auto on_output = [&](int32_t choice, const batching::GenerationOutput& o) {
      ChoiceState& s = state[static_cast<size_t>(choice)];
      if (log->ttft_seconds < 0 && !o.timestamps.empty()) log->ttft_seconds = o.timestamps[0] - received;
      const size_t tokens = o.generated_tokens.size();
      const bool final = o.is_final();
      // Reasoning, text and calls go as what can no longer change in each snapshot, so
      // the deltas add up to the non-streamed reply.
      ReplyDelta d = s.reply.next(*run, o.text, final);
      if (final) completion += static_cast<int64_t>(tokens);
      const bool tokens_to_report = tokens != s.tokens_sent && (!run->parse_tools || want_logprobs);
      if (d.empty() && !final && !tokens_to_report) return true;
      json logprobs = want_logprobs ? chat_logprobs(engine, o, s.tokens_sent, tokens) : json(nullptr);
      s.tokens_sent = tokens;
      if (!d.reasoning.empty()) {
        if (!sink.write(chunk({{"index", choice}, {"delta", {{"reasoning_content", d.reasoning}}}, {"logprobs", logprobs},
                               {"finish_reason", nullptr}})))
          return false;
        logprobs = nullptr;
        if (d.content.empty() && d.calls.empty() && !final) return true;
      }
      json delta = json::object();
      if (!d.content.empty() || (!final && d.calls.empty() && d.reasoning.empty())) delta["content"] = d.content;
      if (!d.calls.empty()) {
        if (!delta.empty() && !sink.write(chunk({{"index", choice}, {"delta", delta}, {"logprobs", logprobs},
                                                 {"finish_reason", nullptr}})))
          return false;
        delta = json::object();
        logprobs = nullptr;
        for (const ReplyDelta::CallPart& p : d.calls) {
          json part = p.head ? json{{"index", p.index}, {"id", p.id}, {"type", "function"},
                                    {"function", {{"name", p.name}, {"arguments", ""}}}}
                             : json{{"index", p.index}, {"function", {{"arguments", p.arguments}}}};
          if (!sink.write(chunk({{"index", choice}, {"delta", {{"tool_calls", json::array({part})}}},
                                 {"logprobs", nullptr}, {"finish_reason", nullptr}})))
            return false;
        }
        if (!final) return true;
      }
      std::string reason = final ? finish_reason_label(o) : "";
      if (final && s.reply.calls_sent() > 0 && reason == "stop") reason = "tool_calls";
      if (final) log->outcome = reason;
      if (!final && delta.empty()) return true;
      return sink.write(chunk({{"index", choice}, {"delta", delta}, {"logprobs", logprobs},
                               {"finish_reason", final ? json(reason) : json(nullptr)}}));
    };
    auto on_end = [&] {
      if (include_usage)
        sink.write(sse_event({{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
                              {"choices", json::array()}, {"usage", usage(completion)}}));
    };
    if (!stream_job(*job, sink, on_output, on_end)) log->outcome = "client disconnected";
    log->completion_tokens = completion;
  };
  return res;
}

}  // namespace loom::serve
