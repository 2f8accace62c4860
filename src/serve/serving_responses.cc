// POST /v1/responses: OpenAI's Responses API over the chat path (chat_run.h). A reply
// is output items (reasoning, message with output_text, function_call); a stream is the
// semantic events (response.created, response.in_progress, response.output_item.added,
// response.content_part.added, response.output_text.delta, … .done, response.completed).
// "store": true keeps the conversation for previous_response_id (response_store.h);
// by default nothing is kept.
#include <memory>

#include "loom/generation/stopping.h"

#include "serve/chat_run.h"
#include "serve/protocol_messages.h"
#include "serve/routes.h"
#include "serve/serving_common.h"

namespace loom::serve {

namespace {

using json = nlohmann::ordered_json;

json responses_usage(int64_t input, int64_t output) {
  return {{"input_tokens", input},
          {"input_tokens_details", {{"cached_tokens", 0}}},
          {"output_tokens", output},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", input + output}};
}

// The Response object around `output`.
json response_object(const std::string& id, const std::string& model, const ResponsesRequest& r, const char* status,
                     json output, const json& usage_obj, bool cut) {
  json o = {{"id", id},
            {"object", "response"},
            {"created_at", unix_now()},
            {"status", status},
            {"error", nullptr},
            {"incomplete_details", cut ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
            {"instructions", r.instructions ? json(*r.instructions) : json(nullptr)},
            {"max_output_tokens", r.echo.value("max_output_tokens", json(nullptr))},
            {"model", model},
            {"output", std::move(output)},
            {"parallel_tool_calls", r.chat.parallel_tool_calls},
            {"previous_response_id", r.previous_response_id ? json(*r.previous_response_id) : json(nullptr)},
            {"reasoning", {{"effort", r.chat.reasoning_effort ? json(*r.chat.reasoning_effort) : json(nullptr)},
                           {"summary", nullptr}}},
            {"store", r.store},
            {"temperature", r.echo.value("temperature", json(1.0))},
            {"text", r.echo.value("text", json{{"format", {{"type", "text"}}}})},
            {"tool_choice", r.echo.value("tool_choice", json("auto"))},
            {"tools", r.echo.value("tools", json::array())},
            {"top_p", r.echo.value("top_p", json(1.0))},
            {"truncation", "disabled"},
            {"usage", usage_obj},
            {"metadata", r.echo.value("metadata", json::object())}};
  return o;
}

json reasoning_item(const std::string& id, const std::string& text) {
  return {{"type", "reasoning"}, {"id", id}, {"summary", json::array()},
          {"content", json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
}
json output_text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
}
json message_item(const std::string& id, const std::string& text, const char* status) {
  return {{"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"},
          {"content", json::array({output_text_part(text)})}};
}
json call_item(const std::string& call_id, const std::string& name, const std::string& args, const char* status) {
  return {{"type", "function_call"}, {"id", "fc_" + call_id.substr(call_id.find('_') + 1)}, {"call_id", call_id},
          {"name", name}, {"arguments", args}, {"status", status}};
}

// What a stored response adds to the conversation: the reply as an assistant message.
void store_reply(Engine& engine, const std::string& id, const ResponsesRequest& r, const std::string& content,
                 const std::string& reasoning, const json& calls) {
  if (!r.store) return;
  json conversation = r.input_messages;
  json msg = {{"role", "assistant"}, {"content", content}};
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  if (!calls.empty()) msg["tool_calls"] = calls;
  conversation.push_back(std::move(msg));
  engine.response_store().put(id, std::move(conversation));
}

json chat_call(const std::string& call_id, const std::string& name, const std::string& args) {
  return {{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}};
}

}  // namespace

HttpResponse handle_responses(Engine& engine, const HttpRequest& req) {
  Parsed<ResponsesRequest> parsed =
      parse_responses_request(req.body, [&engine](const std::string& id) { return engine.response_store().get(id); });
  if (!parsed.ok()) return error_response(parsed.error);
  auto r = std::make_shared<ResponsesRequest>(std::move(*parsed.value));
  auto run = std::make_shared<ChatRun>();
  if (auto e = start_chat(engine, r->chat, req, run.get())) {
    if (e->param.rfind("messages", 0) == 0) e->param = "input";
    if (e->param == "max_tokens") e->param = "max_output_tokens";
    return error_response(*e);
  }
  std::shared_ptr<Job> job = run->job;
  const std::string id = "resp_" + req.request_id;
  const std::string model = engine.served_model_name();
  const int64_t input_tokens = run->prompt_tokens;

  if (!r->chat.stream) {
    std::optional<std::vector<batching::GenerationOutput>> finals = collect_job(*job, req);
    if (!finals) return client_gone_response();
    const batching::GenerationOutput& out = (*finals)[0];
    if (out.status != batching::RequestStatus::kFinished) return error_response(output_error(out));
    ReplyParts reply = parse_reply(*run, out.text, true);
    const bool cut = out.finish_reason == generation::FinishReason::kLength;
    json output = json::array();
    if (!reply.reasoning.empty()) output.push_back(reasoning_item("rs_" + req.request_id, reply.reasoning));
    const std::string content = reply.content.value_or("");
    if (!content.empty() || reply.calls.empty())
      output.push_back(message_item("msg_" + req.request_id, content, cut ? "incomplete" : "completed"));
    json calls = json::array();
    for (const ToolCall& c : reply.calls) {
      const std::string call_id = new_call_id();
      output.push_back(call_item(call_id, c.name, c.arguments, "completed"));
      calls.push_back(chat_call(call_id, c.name, c.arguments));
    }
    const int64_t output_tokens = static_cast<int64_t>(out.generated_tokens.size());
    store_reply(engine, id, *r, content, reply.reasoning, calls);
    HttpResponse res = json_response(response_object(id, model, *r, cut ? "incomplete" : "completed", std::move(output),
                                                     responses_usage(input_tokens, output_tokens), cut));
    res.log->prompt_tokens = input_tokens;
    res.log->completion_tokens = output_tokens;
    if (!out.timestamps.empty()) res.log->ttft_seconds = out.timestamps[0] - req.received_time;
    res.log->outcome = finish_reason_label(out);
    return res;
  }

  HttpResponse res;
  res.content_type = "text/event-stream";
  res.log->prompt_tokens = input_tokens;
  std::shared_ptr<RequestLog> log = res.log;
  res.stream = [&engine, run, r, job, id, model, input_tokens, log, rid = req.request_id,
                received = req.received_time](EventSink& sink) {
    int64_t seq = 0;
    auto emit = [&](const std::string& type, json fields) {
      json e = {{"type", type}, {"sequence_number", seq++}};
      for (auto& [k, v] : fields.items()) e[k] = std::move(v);
      return sink.write(named_sse_event(type, e));
    };
    ReplyStream reply;
    json items = json::array();  // the output so far (the open item last)
    std::string open;            // the open item's type, "" when none
    std::string reasoning_text, content_text;
    json calls = json::array();  // for the store
    auto item_id = [&]() { return items.back()["id"].get<std::string>(); };
    auto close_item = [&](const char* status) {
      if (open.empty()) return true;
      const int64_t index = static_cast<int64_t>(items.size()) - 1;
      json& item = items.back();
      bool ok = true;
      if (open == "reasoning") {
        const std::string text = item["content"][0]["text"];
        ok = emit("response.reasoning_text.done", {{"item_id", item_id()}, {"output_index", index}, {"content_index", 0}, {"text", text}});
      } else if (open == "message") {
        item["status"] = status;
        const json part = item["content"][0];
        ok = emit("response.output_text.done", {{"item_id", item_id()}, {"output_index", index}, {"content_index", 0},
                                                {"text", part["text"]}, {"logprobs", json::array()}}) &&
             emit("response.content_part.done", {{"item_id", item_id()}, {"output_index", index}, {"content_index", 0}, {"part", part}});
      } else {
        item["status"] = "completed";
        ok = emit("response.function_call_arguments.done", {{"item_id", item_id()}, {"output_index", index},
                                                            {"name", item["name"]}, {"arguments", item["arguments"]}});
        calls.push_back(chat_call(item["call_id"], item["name"], item["arguments"]));
      }
      open.clear();
      return ok && emit("response.output_item.done", {{"output_index", index}, {"item", item}});
    };
    auto open_item = [&](const std::string& type, json item) {
      if (!close_item("completed")) return false;
      items.push_back(item);
      open = type;
      const int64_t index = static_cast<int64_t>(items.size()) - 1;
      if (type == "reasoning") {
        json added = item;
        added["content"] = json::array();
        return emit("response.output_item.added", {{"output_index", index}, {"item", added}});
      }
      if (type == "message") {
        json added = item;
        added["content"] = json::array();
        return emit("response.output_item.added", {{"output_index", index}, {"item", added}}) &&
               emit("response.content_part.added", {{"item_id", item_id()}, {"output_index", index}, {"content_index", 0},
                                                    {"part", output_text_part("")}});
      }
      return emit("response.output_item.added", {{"output_index", index}, {"item", item}});
    };
    const json base = response_object(id, model, *r, "in_progress", json::array(), nullptr, false);
    bool ok = emit("response.created", {{"response", base}}) && emit("response.in_progress", {{"response", base}});
    if (!ok) job->cancel();
    int64_t output_tokens = 0;
    auto on_output = [&](int32_t, const batching::GenerationOutput& o) {
      if (log->ttft_seconds < 0 && !o.timestamps.empty()) log->ttft_seconds = o.timestamps[0] - received;
      const bool final = o.is_final();
      ReplyDelta d = reply.next(*run, o.text, final);
      if (!d.reasoning.empty()) {
        if (open != "reasoning" && !open_item("reasoning", reasoning_item("rs_" + rid, ""))) return false;
        items.back()["content"][0]["text"] = items.back()["content"][0]["text"].get<std::string>() + d.reasoning;
        reasoning_text += d.reasoning;
        if (!emit("response.reasoning_text.delta", {{"item_id", item_id()}, {"output_index", items.size() - 1},
                                                    {"content_index", 0}, {"delta", d.reasoning}}))
          return false;
      }
      if (!d.content.empty()) {
        if (open != "message" && !open_item("message", message_item("msg_" + rid, "", "in_progress"))) return false;
        items.back()["content"][0]["text"] = items.back()["content"][0]["text"].get<std::string>() + d.content;
        content_text += d.content;
        if (!emit("response.output_text.delta", {{"item_id", item_id()}, {"output_index", items.size() - 1},
                                                 {"content_index", 0}, {"delta", d.content}, {"logprobs", json::array()}}))
          return false;
      }
      for (const ReplyDelta::CallPart& p : d.calls) {
        if (p.head) {
          if (!open_item("function_call", call_item(p.id, p.name, "", "in_progress"))) return false;
          continue;
        }
        items.back()["arguments"] = items.back()["arguments"].get<std::string>() + p.arguments;
        if (!emit("response.function_call_arguments.delta", {{"item_id", item_id()}, {"output_index", items.size() - 1},
                                                             {"delta", p.arguments}}))
          return false;
      }
      if (!final) return true;
      output_tokens = static_cast<int64_t>(o.generated_tokens.size());
      const bool cut = o.finish_reason == generation::FinishReason::kLength;
      // An empty reply is still one (empty) message, as the non-streamed one.
      if (content_text.empty() && reply.calls_sent() == 0 && open != "message")
        if (!open_item("message", message_item("msg_" + rid, "", "in_progress"))) return false;
      if (!close_item(cut ? "incomplete" : "completed")) return false;
      log->outcome = finish_reason_label(o);
      store_reply(engine, id, *r, content_text, reasoning_text, calls);
      const char* status = cut ? "incomplete" : "completed";
      return emit(cut ? "response.incomplete" : "response.completed",
                  {{"response", response_object(id, model, *r, status, items, responses_usage(input_tokens, output_tokens), cut)}});
    };
    StreamFraming framing;
    framing.error_event = [&](const ApiError& e) {
      json err = {{"type", "error"}, {"sequence_number", seq++}, {"code", e.code.empty() ? json(nullptr) : json(e.code)},
                  {"message", e.message}, {"param", e.param.empty() ? json(nullptr) : json(e.param)}};
      return named_sse_event("error", err);
    };
    framing.done = "";
    if (!stream_job(*job, sink, on_output, [] {}, &framing)) log->outcome = "client disconnected";
    log->completion_tokens = output_tokens;
  };
  return res;
}

}  // namespace loom::serve
