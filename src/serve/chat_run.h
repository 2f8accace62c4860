// What the chat-shaped routes share (OpenAI Chat Completions, Anthropic Messages,
// OpenAI Responses): a conversation in Chat Completions' terms rendered with the
// checkpoint's chat template, checked and submitted; then each choice's text split
// into reasoning (reasoning.h), answer and tool calls (tool_calls.h), whole or as the
// deltas of a stream. The other APIs translate their requests into a
// ChatCompletionRequest, so the same conversation gives the same reply through each.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/engine.h"
#include "serve/http.h"
#include "serve/protocol.h"
#include "serve/reasoning.h"
#include "serve/tool_calls.h"

namespace loom::serve {

struct ChatRun {
  std::shared_ptr<Job> job;
  int64_t prompt_tokens = 0;
  ToolCallFormat tool_format = ToolCallFormat::kUnknown;
  bool parse_tools = false;  // tools given and tool_choice not none
  bool forced = false;       // tool_choice required or named: the reply is calls under a grammar
  bool parallel_tool_calls = true;
  nlohmann::ordered_json tools;  // when parse_tools
  ReasoningSyntax reasoning;
  bool started_open = false;  // the prompt left a thinking section open
};

// Renders the conversation, checks it against the context and submits it. A request
// the model cannot take is the ApiError (messages, tools, max_tokens, … named).
std::optional<ApiError> start_chat(Engine& engine, const ChatCompletionRequest& r, const HttpRequest& req,
                                   ChatRun* out);

// Only renders and tokenizes (count_tokens): the prompt's token count.
std::optional<ApiError> count_chat_tokens(Engine& engine, const ChatCompletionRequest& r, int64_t* out);

struct ReplyParts {
  std::string reasoning;
  bool reasoned = false;               // the template thinks and the reply opened a section
  std::optional<std::string> content;  // nullopt: the reply is only calls
  std::vector<ToolCall> calls;
  std::optional<ToolCall> partial;     // a forced call still being written (streams)
};
ReplyParts parse_reply(const ChatRun& run, const std::string& text, bool final);

// A new tool call id: "call_" and 24 letters and digits, as OpenAI's.
std::string new_call_id();

// One choice of a stream: what was sent so far, and what a new snapshot adds.
struct ReplyDelta {
  std::string reasoning, content;
  struct CallPart {
    size_t index = 0;
    bool head = false;    // the call's first part: id and name (arguments empty)
    std::string id, name;  // head only
    std::string arguments;
  };
  std::vector<CallPart> calls;
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};
class ReplyStream {
 public:
  ReplyDelta next(const ChatRun& run, const std::string& text, bool final);
  size_t calls_sent() const { return args_sent_.size(); }

 private:
  size_t reasoning_sent_ = 0, content_sent_ = 0;
  std::vector<size_t> args_sent_;
};

}  // namespace loom::serve
