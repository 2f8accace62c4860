#include "serve/chat_run.h"

#include <algorithm>
#include <random>

#include "serve/serving_common.h"

namespace loom::serve {

namespace {

using json = nlohmann::ordered_json;

struct Rendered {
  std::vector<int32_t> prompt;
  std::string text;
  ToolCallFormat tool_format = ToolCallFormat::kUnknown;
  bool parse_tools = false, forced = false, constrained = false;
  ReasoningSyntax reasoning;
};

std::optional<ApiError> render(Engine& engine, const ChatCompletionRequest& r, Rendered* out) {
  const Tokenizer* tok = engine.tokenizer();
  const tok::ChatTemplate* tmpl = engine.chat_template();
  if (!tok || !tmpl)
    return bad_field("messages", "the model has no chat template (tokenizer_config.json chat_template): "
                                 "use /v1/completions");
  // Tools reach the template as its `tools` variable; calls come back in the family's
  // format, told by the template's text.
  out->tool_format = detect_tool_call_format(tmpl->source());
  out->parse_tools = !r.tools.is_null() && r.tool_choice.mode != ToolChoice::Mode::kNone;
  if (out->parse_tools && out->tool_format == ToolCallFormat::kUnknown)
    return bad_field("tools", "the model's chat template writes no tool-call format loom knows (Llama 3.x "
                              "JSON calls, Qwen <tool_call> tags): tools need tool_choice \"none\" here");
  out->forced = r.tool_choice.mode == ToolChoice::Mode::kRequired || r.tool_choice.mode == ToolChoice::Mode::kNamed;
  out->constrained = out->forced || r.constraint.has_value();
  out->reasoning = detect_reasoning(tmpl->source());
  json extras = r.chat_template_kwargs;
  if (!r.tools.is_null() && !extras.contains("tools")) extras["tools"] = r.tools;
  // A constraint holds from the first token, so a constrained reply does not think;
  // neither does one asked for reasoning_effort "none".
  if (out->reasoning.thinks() && !extras.contains("enable_thinking") &&
      (out->constrained || r.reasoning_effort == "none"))
    extras["enable_thinking"] = false;
  Result<std::string> rendered = tmpl->apply(r.messages, r.add_generation_prompt, extras);
  if (!rendered.ok()) return bad_field("messages", "the chat template failed: " + rendered.status().message());
  if (auto e = check_prompt_bytes(engine, rendered->size(), "messages")) return e;
  Result<Encoding> enc = tok->encode(*rendered, r.add_special_tokens);
  if (!enc.ok()) return from_status(enc.status(), "messages");
  out->prompt = enc->ids;
  out->text = std::move(*rendered);
  if (out->prompt.empty()) return bad_field("messages", "the rendered conversation has no tokens");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> count_chat_tokens(Engine& engine, const ChatCompletionRequest& r, int64_t* out) {
  Rendered rd;
  if (auto e = render(engine, r, &rd)) return e;
  *out = static_cast<int64_t>(rd.prompt.size());
  return std::nullopt;
}

std::optional<ApiError> start_chat(Engine& engine, const ChatCompletionRequest& r, const HttpRequest& req,
                                   ChatRun* run) {
  if (auto e = engine.check_model(r.model)) return e;
  Rendered rd;
  if (auto e = render(engine, r, &rd)) return e;
  const Tokenizer* tok = engine.tokenizer();
  const int64_t prompt_tokens = static_cast<int64_t>(rd.prompt.size());
  const int64_t max_tokens = r.max_tokens.value_or(std::max<int64_t>(1, engine.max_model_len() - prompt_tokens));
  if (auto e = check_context(engine, prompt_tokens, max_tokens)) {
    if (e->param == "prompt") e->param = "messages";
    return e;
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
    if (auto e = attach_constraint(engine, *r.constraint, &o, req.client_connected)) return e;
  if (rd.forced) {
    RequestedConstraint one_call;
    const bool several = r.parallel_tool_calls && r.tool_choice.mode == ToolChoice::Mode::kRequired;
    if (auto e = forced_tool_call_constraint(rd.tool_format, r.tools, r.tool_choice.name, several, &one_call)) return e;
    if (auto e = attach_constraint(engine, one_call, &o, req.client_connected)) return e;
  }
  run->reasoning = rd.reasoning;
  run->started_open = !rd.constrained && prompt_opens_reasoning(rd.reasoning, rd.text);
  std::optional<int64_t> budget = r.max_thinking_tokens;
  if (!budget && r.reasoning_effort) budget = effort_budget(*r.reasoning_effort);
  if (budget && rd.reasoning.thinks() && !rd.constrained) {
    Result<Encoding> close = tok->encode(forced_close_text(rd.reasoning), /*add_special_tokens=*/false);
    if (!close.ok() || close->ids.empty()) return from_status(close.ok() ? internal_error("the close tag encodes to no tokens") : close.status(), "max_thinking_tokens");
    o.thinking_budget = thinking_budget(rd.reasoning, *budget, run->started_open, close->ids);
  }

  Result<std::shared_ptr<Job>> submitted = engine.submit({rd.prompt}, r.n, o, "chatcmpl", req.received_time);
  if (!submitted.ok()) return from_status(submitted.status());
  run->job = *submitted;
  run->prompt_tokens = prompt_tokens;
  run->tool_format = rd.tool_format;
  run->parse_tools = rd.parse_tools;
  run->forced = rd.forced;
  run->parallel_tool_calls = r.parallel_tool_calls;
  run->tools = rd.parse_tools ? r.tools : json(nullptr);
  return std::nullopt;
}

ReplyParts parse_reply(const ChatRun& run, const std::string& text, bool final) {
  ReplyParts out;
  SplitReply split = split_reasoning(run.reasoning, text, run.started_open, final);
  out.reasoning = std::move(split.reasoning);
  out.reasoned = split.reasoned;
  if (!run.parse_tools) {
    out.content = std::move(split.content);
    return out;
  }
  ParsedReply reply = run.forced ? parse_forced_tool_call(run.tool_format, split.content, final)
                                 : parse_tool_calls(run.tool_format, split.content, run.tools, final);
  if (!run.parallel_tool_calls) keep_first_call(&reply);
  out.content = std::move(reply.content);
  out.calls = std::move(reply.calls);
  out.partial = std::move(reply.partial);
  return out;
}

std::string new_call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof(kChars) - 1)];
  return id;
}

ReplyDelta ReplyStream::next(const ChatRun& run, const std::string& text, bool final) {
  ReplyDelta d;
  ReplyParts parts = parse_reply(run, text, final);
  if (parts.reasoning.size() > reasoning_sent_) d.reasoning = parts.reasoning.substr(reasoning_sent_);
  reasoning_sent_ = std::max(reasoning_sent_, parts.reasoning.size());
  const std::string content = parts.content.value_or("");
  if (content.size() > content_sent_) d.content = content.substr(content_sent_);
  content_sent_ = std::max(content_sent_, content.size());
  // A call goes as its head (index, id, name), then fragments of its arguments as
  // they become final (a forced call's while it is written, a parsed one's at once).
  std::vector<ToolCall> calls = std::move(parts.calls);
  if (parts.partial) calls.push_back(std::move(*parts.partial));
  for (size_t k = 0; k < calls.size(); ++k) {
    if (k >= args_sent_.size()) {
      args_sent_.push_back(0);
      d.calls.push_back({k, true, new_call_id(), calls[k].name, ""});
    }
    const std::string& args = calls[k].arguments;
    if (args.size() > args_sent_[k]) {
      d.calls.push_back({k, false, "", "", args.substr(args_sent_[k])});
      args_sent_[k] = args.size();
    }
  }
  return d;
}

}  // namespace loom::serve
