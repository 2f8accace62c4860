// POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API over the
// chat path (chat_run.h). A reply is content blocks: thinking (templates that think),
// text, tool_use; a stream is Anthropic's events (message_start, content_block_start /
// _delta / _stop, message_delta, message_stop, ping). Errors are Anthropic's shape (the
// router rewrites every error of these paths, see router.cc).
#include <memory>

#include "loom/generation/stopping.h"
#include "serve/chat_run.h"
#include "serve/json_parse.h"
#include "serve/protocol_messages.h"
#include "serve/routes.h"
#include "serve/serving_common.h"

namespace loom::serve {

namespace {

using json = nlohmann::ordered_json;

std::string tool_use_id(const std::string& call_id) { return "toolu_" + call_id.substr(call_id.find('_') + 1); }

// The stop sequence that ended the reply: the one found earliest in the generated text
// where the shown text stops.
json matched_stop(const Engine& engine, const batching::GenerationOutput& o, const std::vector<std::string>& stops) {
  if (o.finish_reason != generation::FinishReason::kStopString || stops.empty()) return nullptr;
  if (stops.size() == 1 || !engine.tokenizer()) return stops[0];
  Result<std::string> full = engine.tokenizer()->decode(o.generated_tokens, /*skip_special_tokens=*/true);
  if (!full.ok()) return stops[0];
  size_t best = std::string::npos;
  json found = stops[0];
  const size_t from = o.text.size() > 8 ? o.text.size() - 8 : 0;
  for (const std::string& s : stops) {
    const size_t at = full->find(s, from);
    if (at < best) {
      best = at;
      found = s;
    }
  }
  return found;
}

const char* stop_reason(const batching::GenerationOutput& o, bool called) {
  if (o.finish_reason == generation::FinishReason::kLength) return "max_tokens";
  if (called) return "tool_use";
  if (o.finish_reason == generation::FinishReason::kStopString) return "stop_sequence";
  return "end_turn";
}

json anthropic_usage(int64_t input, int64_t output) { return {{"input_tokens", input}, {"output_tokens", output}}; }

std::string anthropic_event(const json& data) { return named_sse_event(data["type"].get<std::string>(), data); }

}  // namespace

HttpResponse handle_messages_count_tokens(Engine& engine, const HttpRequest& req) {
  Parsed<MessagesRequest> parsed = parse_messages_request(req.body, /*count_tokens=*/true);
  if (!parsed.ok()) return error_response(parsed.error);
  if (auto e = engine.check_model(parsed.value->chat.model)) return error_response(*e);
  int64_t n = 0;
  if (auto e = count_chat_tokens(engine, parsed.value->chat, &n)) return error_response(*e);
  return json_response({{"input_tokens", n}});
}

HttpResponse handle_messages(Engine& engine, const HttpRequest& req) {
  Parsed<MessagesRequest> parsed = parse_messages_request(req.body);
  if (!parsed.ok()) return error_response(parsed.error);
  const MessagesRequest& r = *parsed.value;
  auto run = std::make_shared<ChatRun>();
  if (auto e = start_chat(engine, r.chat, req, run.get())) return error_response(*e);
  std::shared_ptr<Job> job = run->job;
  const std::string id = "msg_" + req.request_id;
  const std::string model = engine.served_model_name();
  const std::vector<std::string> stops = r.stop_sequences;
  const int64_t input_tokens = run->prompt_tokens;

  if (!r.chat.stream) {
    std::optional<std::vector<batching::GenerationOutput>> finals = collect_job(*job, req);
    if (!finals) return client_gone_response();
    const batching::GenerationOutput& out = (*finals)[0];
    if (out.status != batching::RequestStatus::kFinished) return error_response(output_error(out));
    ReplyParts reply = parse_reply(*run, out.text, true);
    json content = json::array();
    if (!reply.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", reply.reasoning}, {"signature", ""}});
    if (reply.content && !reply.content->empty()) content.push_back({{"type", "text"}, {"text", *reply.content}});
    for (const ToolCall& c : reply.calls) {
      std::optional<json> input = parse_json(c.arguments);
      content.push_back({{"type", "tool_use"}, {"id", tool_use_id(new_call_id())}, {"name", c.name},
                         {"input", input && input->is_object() ? *input : json::object()}});
    }
    const int64_t output_tokens = static_cast<int64_t>(out.generated_tokens.size());
    const char* reason = stop_reason(out, !reply.calls.empty());
    HttpResponse res = json_response({{"id", id},
                                      {"type", "message"},
                                      {"role", "assistant"},
                                      {"model", model},
                                      {"content", content},
                                      {"stop_reason", reason},
                                      {"stop_sequence", matched_stop(engine, out, stops)},
                                      {"usage", anthropic_usage(input_tokens, output_tokens)}});
    res.log->prompt_tokens = input_tokens;
    res.log->completion_tokens = output_tokens;
    if (!out.timestamps.empty()) res.log->ttft_seconds = out.timestamps[0] - req.received_time;
    res.log->outcome = reason;
    return res;
  }

  HttpResponse res;
  res.content_type = "text/event-stream";
  res.log->prompt_tokens = input_tokens;
  std::shared_ptr<RequestLog> log = res.log;
  res.stream = [&engine, run, job, id, model, stops, input_tokens, log, received = req.received_time](EventSink& sink) {
    ReplyStream reply;
    int64_t output_tokens = 0;
    int index = -1;        // the open block, -1: none
    std::string open;      // its type
    auto close_block = [&]() {
      if (open.empty()) return true;
      open.clear();
      return sink.write(anthropic_event({{"type", "content_block_stop"}, {"index", index}}));
    };
    auto start_block = [&](const std::string& type, json block) {
      if (!close_block()) return false;
      ++index;
      open = type;
      return sink.write(anthropic_event({{"type", "content_block_start"}, {"index", index}, {"content_block", block}}));
    };
    auto delta = [&](json d) { return sink.write(anthropic_event({{"type", "content_block_delta"}, {"index", index}, {"delta", d}})); };
    bool ok = sink.write(anthropic_event({{"type", "message_start"},
                                          {"message", {{"id", id}, {"type", "message"}, {"role", "assistant"},
                                                       {"model", model}, {"content", json::array()},
                                                       {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                                                       {"usage", anthropic_usage(input_tokens, 0)}}}})) &&
              sink.write(anthropic_event({{"type", "ping"}}));
    if (!ok) job->cancel();
    auto on_output = [&](int32_t, const batching::GenerationOutput& o) {
      if (log->ttft_seconds < 0 && !o.timestamps.empty()) log->ttft_seconds = o.timestamps[0] - received;
      const bool final = o.is_final();
      ReplyDelta d = reply.next(*run, o.text, final);
      if (!d.reasoning.empty()) {
        if (open != "thinking" && !start_block("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}))
          return false;
        if (!delta({{"type", "thinking_delta"}, {"thinking", d.reasoning}})) return false;
      }
      if (!d.content.empty()) {
        if (open != "text" && !start_block("text", {{"type", "text"}, {"text", ""}})) return false;
        if (!delta({{"type", "text_delta"}, {"text", d.content}})) return false;
      }
      for (const ReplyDelta::CallPart& p : d.calls) {
        if (p.head && !start_block("tool_use", {{"type", "tool_use"}, {"id", tool_use_id(p.id)}, {"name", p.name},
                                                {"input", json::object()}}))
          return false;
        if (!p.head && !delta({{"type", "input_json_delta"}, {"partial_json", p.arguments}})) return false;
      }
      if (!final) return true;
      output_tokens = static_cast<int64_t>(o.generated_tokens.size());
      const char* reason = stop_reason(o, reply.calls_sent() > 0);
      log->outcome = reason;
      return close_block() &&
             sink.write(anthropic_event({{"type", "message_delta"},
                                         {"delta", {{"stop_reason", reason}, {"stop_sequence", matched_stop(engine, o, stops)}}},
                                         {"usage", {{"output_tokens", output_tokens}}}}));
    };
    auto on_end = [&] { sink.write(anthropic_event({{"type", "message_stop"}})); };
    StreamFraming framing;
    framing.error_event = [](const ApiError& e) { return named_sse_event("error", anthropic_error_json(e)); };
    framing.done = "";
    if (!stream_job(*job, sink, on_output, on_end, &framing)) log->outcome = "client disconnected";
    log->completion_tokens = output_tokens;
  };
  return res;
}

}  // namespace loom::serve
