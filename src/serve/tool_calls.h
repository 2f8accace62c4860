// Tool calls in a model family's own format, and back to OpenAI's tool_calls.
// Families are told apart by their chat template's text (what the template tells the
// model to write), not by model names:
//   - Llama 3.x (3.1, 3.2): a JSON object {"name": …, "parameters": {…}} as the whole
//     reply (several joined by ';'), optionally after <|python_tag|>.
//   - Qwen2.5 / Qwen3 (Hermes-style): <tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>
//     blocks after optional text.
// A forced call (tool_choice required or named) is generated under a grammar built from
// the tools' parameter schemas, so it always parses and validates; with auto the text
// is generated freely and the calls are parsed out of it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/protocol.h"

namespace loom::serve {

enum class ToolCallFormat { kUnknown, kLlama3Json, kHermesTags };

ToolCallFormat detect_tool_call_format(std::string_view chat_template);
const char* tool_call_format_name(ToolCallFormat f);

struct ToolCall {
  std::string name;
  std::string arguments;  // the arguments object as JSON text
};

// What a reply holds. `content` is the text part (nullopt when the reply is only calls).
// With final false the text is still growing: the result then holds only what can no
// longer change (text that cannot turn into a call, complete calls), so successive
// results extend each other and the last (final true) is the whole reply.
struct ParsedReply {
  std::optional<std::string> content;
  std::vector<ToolCall> calls;
  // A forced call still being written: its name, and the part of its arguments text
  // that can no longer change (the streams send it as fragments).
  std::optional<ToolCall> partial;
};
ParsedReply parse_tool_calls(ToolCallFormat format, std::string_view text, const nlohmann::ordered_json& tools,
                             bool final);

// parallel_tool_calls false: a reply keeps its first call only (the rest is dropped, as
// the model was asked for one).
void keep_first_call(ParsedReply* reply);

// A reply generated under forced_tool_call_constraint: one call, or several in a row,
// whose arguments are the model's own text (the grammar fixes the shape, so they are
// known a fragment at a time). A reply cut by max_tokens keeps its last call with the
// arguments written so far, as OpenAI's API does with finish_reason "length".
ParsedReply parse_forced_tool_call(ToolCallFormat format, std::string_view text, bool final);

// The grammar (as a ConstraintSpec) of a call in the family's format, or with `several`
// of one or more calls (tool_choice "required" with parallel_tool_calls): to the named
// tool, or to any of `tools` when name is empty. A parameter schema the compiler
// refuses is a 400 naming tools[i].function.parameters (refused keywords are ignored
// unless the function says "strict": true).
std::optional<ApiError> forced_tool_call_constraint(ToolCallFormat format, const nlohmann::ordered_json& tools,
                                                    const std::string& name, bool several, RequestedConstraint* out);

}  // namespace loom::serve
