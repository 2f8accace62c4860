// POST /v1/chat/completions: messages rendered with the checkpoint's chat
// template (as Transformers' apply_chat_template), then generated like a
// completion; chat.completion objects, or chat.completion.chunk events.
#include <algorithm>
#include <random>

#include "serve/routes.h"
#include "serve/serving_common.h"
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

// OpenAI's call ids: "call_" and 24 random letters and digits.
std::string new_call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof(kChars) - 1)];
  return id;
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
  if (auto e = engine.check_model(r.model)) return error_response(*e);
  const Tokenizer* tok = engine.tokenizer();
  const tok::ChatTemplate* tmpl = engine.chat_template();
  if (!tok || !tmpl)
    return error_response(bad_field("messages", "the model has no chat template (tokenizer_config.json chat_template): "
                                                "use /v1/completions"));
  // Tools reach the template as its `tools` variable; calls come back in the family's
  // format, told by the template's text.
  const ToolCallFormat tool_format = detect_tool_call_format(tmpl->source());
  const bool parse_tools = !r.tools.is_null() && r.tool_choice.mode != ToolChoice::Mode::kNone;
  if (parse_tools && tool_format == ToolCallFormat::kUnknown)
    return error_response(bad_field("tools", "the model's chat template writes no tool-call format loom knows (Llama 3.x "
                                             "JSON calls, Qwen <tool_call> tags): tools need tool_choice \"none\" here"));
  json extras = r.chat_template_kwargs;
  if (!r.tools.is_null() && !extras.contains("tools")) extras["tools"] = r.tools;
  Result<std::string> rendered = tmpl->apply(r.messages, r.add_generation_prompt, extras);
  if (!rendered.ok()) return error_response(bad_field("messages", "the chat template failed: " + rendered.status().message()));
  if (auto e = check_prompt_bytes(engine, rendered->size(), "messages")) return error_response(*e);
  Result<Encoding> enc = tok->encode(*rendered, r.add_special_tokens);
  if (!enc.ok()) return error_response(from_status(enc.status(), "messages"));
  std::vector<int32_t> prompt = enc->ids;
  if (prompt.empty()) return error_response(bad_field("messages", "the rendered conversation has no tokens"));
  const int64_t prompt_tokens = static_cast<int64_t>(prompt.size());
  const int64_t max_tokens = r.max_tokens.value_or(std::max<int64_t>(1, engine.max_model_len() - prompt_tokens));
  if (auto e = check_context(engine, prompt_tokens, max_tokens)) {
    if (e->param == "prompt") e->param = "messages";
    return error_response(*e);
  }

  batching::RequestOptions o = request_options(r);
  o.max_new_tokens = max_tokens;
  o.streaming = r.stream;
  o.logprobs = r.logprobs;
  o.top_logprobs = r.top_logprobs;
  // The reply ends at the end-of-turn token as well as at generation_config's EOS.
  std::vector<int32_t> eos;
  for (int64_t id : engine.generation_config().eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  if (auto id = tok->eos_token_id(); id && std::find(eos.begin(), eos.end(), *id) == eos.end()) eos.push_back(*id);
  o.eos_token_ids = eos;
  if (r.constraint)
    if (auto e = attach_constraint(engine, *r.constraint, &o, req.client_connected)) return error_response(*e);
  const bool forced = r.tool_choice.mode == ToolChoice::Mode::kRequired || r.tool_choice.mode == ToolChoice::Mode::kNamed;
  if (forced) {
    RequestedConstraint one_call;
    const bool several = r.parallel_tool_calls && r.tool_choice.mode == ToolChoice::Mode::kRequired;
    if (auto e = forced_tool_call_constraint(tool_format, r.tools, r.tool_choice.name, several, &one_call))
      return error_response(*e);
    if (auto e = attach_constraint(engine, one_call, &o, req.client_connected)) return error_response(*e);
  }

  Result<std::shared_ptr<Job>> submitted = engine.submit({prompt}, r.n, o, "chatcmpl", req.received_time);
  if (!submitted.ok()) return error_response(from_status(submitted.status()));
  std::shared_ptr<Job> job = *submitted;
  const std::string id = response_id("chatcmpl", req);
  const int64_t created = unix_now();
  const std::string model = engine.served_model_name();
  auto usage = [prompt_tokens](int64_t completion) { return usage_json(prompt_tokens, completion); };

  if (!r.stream) {
    std::optional<std::vector<batching::GenerationOutput>> finals = collect_job(*job, req);
    if (!finals) return client_gone_response();
    return finished_response(*finals, req, id, "chat.completion", model, prompt_tokens,
                             [&](size_t, const batching::GenerationOutput& out) {
                               json message = {{"role", "assistant"}, {"content", out.text}};
                               bool called = false;
                               if (parse_tools) {
                                 ParsedReply reply = forced ? parse_forced_tool_call(tool_format, out.text, true)
                                                            : parse_tool_calls(tool_format, out.text, r.tools, true);
                                 if (!r.parallel_tool_calls) keep_first_call(&reply);
                                 message["content"] = reply.content ? json(*reply.content) : json(nullptr);
                                 if (!reply.calls.empty()) message["tool_calls"] = tool_calls_json(reply.calls);
                                 called = !reply.calls.empty();
                               }
                               json fields = {{"message", std::move(message)},
                                              {"logprobs", r.logprobs ? chat_logprobs(engine, out, 0, out.generated_tokens.size())
                                                                      : json(nullptr)}};
                               if (called && std::string(finish_reason_label(out)) == "stop") fields["finish_reason"] = "tool_calls";
                               return fields;
                             });
  }

  HttpResponse res;
  res.content_type = "text/event-stream";
  res.log->prompt_tokens = prompt_tokens;
  std::shared_ptr<RequestLog> log = res.log;
  const bool include_usage = r.include_usage;
  const bool want_logprobs = r.logprobs;
  const json tools = parse_tools ? r.tools : json(nullptr);
  res.stream = [&engine, job, id, created, model, include_usage, want_logprobs, usage, log, tools, tool_format, forced,
                parallel_tool_calls = r.parallel_tool_calls, received = req.received_time](EventSink& sink) {
    struct ChoiceState {
      size_t text_sent = 0, tokens_sent = 0;
      std::vector<size_t> args_sent;  // per call: arguments bytes sent (a call's head went first)
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
      // With tools, the text goes through the parser: only what can no longer become
      // a call is sent as content; a call is sent as its head (index, id, name), then
      // fragments of its arguments as they become final (a forced call's while it is
      // written, a parsed one's at once), so the deltas add up to the non-streamed reply.
      std::vector<json> call_parts;
      std::string text;
      if (!tools.is_null()) {
        ParsedReply reply = forced ? parse_forced_tool_call(tool_format, o.text, final)
                                   : parse_tool_calls(tool_format, o.text, tools, final);
        if (!parallel_tool_calls) keep_first_call(&reply);
        const std::string content = reply.content.value_or("");
        if (content.size() > s.text_sent) text = content.substr(s.text_sent);
        s.text_sent = std::max(s.text_sent, content.size());
        std::vector<ToolCall> calls = std::move(reply.calls);
        if (reply.partial) calls.push_back(std::move(*reply.partial));
        for (size_t k = 0; k < calls.size(); ++k) {
          const int64_t index = static_cast<int64_t>(k);
          if (k >= s.args_sent.size()) {
            s.args_sent.push_back(0);
            call_parts.push_back({{"index", index}, {"id", new_call_id()}, {"type", "function"},
                                  {"function", {{"name", calls[k].name}, {"arguments", ""}}}});
          }
          const std::string& args = calls[k].arguments;
          if (args.size() > s.args_sent[k]) {
            call_parts.push_back({{"index", index}, {"function", {{"arguments", args.substr(s.args_sent[k])}}}});
            s.args_sent[k] = args.size();
          }
        }
      } else {
        text = o.text.size() > s.text_sent ? o.text.substr(s.text_sent) : std::string();
        s.text_sent = std::max(s.text_sent, o.text.size());
      }
      if (final) completion += static_cast<int64_t>(tokens);
      const bool tokens_to_report = tokens != s.tokens_sent && (tools.is_null() || want_logprobs);
      if (text.empty() && call_parts.empty() && !final && !tokens_to_report) return true;
      json delta = json::object();
      if (!text.empty() || (!final && call_parts.empty())) delta["content"] = text;
      json logprobs = want_logprobs ? chat_logprobs(engine, o, s.tokens_sent, tokens) : json(nullptr);
      s.tokens_sent = tokens;
      if (!call_parts.empty()) {
        if (!delta.empty() && !sink.write(chunk({{"index", choice}, {"delta", delta}, {"logprobs", logprobs},
                                                 {"finish_reason", nullptr}})))
          return false;
        delta = json::object();
        logprobs = nullptr;
        for (const json& part : call_parts)
          if (!sink.write(chunk({{"index", choice}, {"delta", {{"tool_calls", json::array({part})}}},
                                 {"logprobs", nullptr}, {"finish_reason", nullptr}})))
            return false;
        if (!final) return true;
      }
      std::string reason = final ? finish_reason_label(o) : "";
      if (final && !s.args_sent.empty() && reason == "stop") reason = "tool_calls";
      if (final) log->outcome = reason;
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
