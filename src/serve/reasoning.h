// Reasoning ("thinking") sections of a model's replies, split from the answer: the one
// place that knows how a family marks them. Families are told apart by their chat
// template's text, as tool-call formats are (tool_calls.h):
//   - <think> … </think> (Qwen3, DeepSeek-R1 and its distills, SmolLM3): the model opens
//     the section itself, or the template's generation prompt leaves it open.
// A second format (gpt-oss's Harmony channels) plugs in as another ReasoningFormat with
// its own branch in split_reasoning and thinking_budget.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "loom/batching/request_options.h"

namespace loom::serve {

enum class ReasoningFormat { kNone, kThinkTags };

struct ReasoningSyntax {
  ReasoningFormat format = ReasoningFormat::kNone;
  std::string open, close;  // the tags as text
  bool thinks() const { return format != ReasoningFormat::kNone; }
};

ReasoningSyntax detect_reasoning(std::string_view chat_template);

// The rendered prompt ends inside an open section (the template wrote the open tag last).
bool prompt_opens_reasoning(const ReasoningSyntax& syntax, std::string_view rendered_prompt);

// A reply split into its reasoning and its answer. The reasoning is what lies between
// the tags with surrounding whitespace trimmed; the answer what follows the close tag,
// leading whitespace trimmed. A reply that never opens a section is all answer; one
// whose section never closes is all reasoning. With final false the text is still
// growing and the result holds only what can no longer change (a tag's first bytes
// are held back), so successive results extend each other.
struct SplitReply {
  std::string reasoning;
  std::string content;
  bool reasoned = false;  // a section was opened
};
SplitReply split_reasoning(const ReasoningSyntax& syntax, std::string_view text, bool started_open, bool final);

// The budget the batching loop enforces: after `tokens` generated tokens of an open
// section, the close tag (and the blank line the templates put after it) is forced.
// `close_ids` is that text encoded by the model's tokenizer.
batching::ThinkingBudget thinking_budget(const ReasoningSyntax& syntax, int64_t tokens, bool started_open,
                                         std::vector<int32_t> close_ids);
// The text thinking_budget forces, to be encoded by the caller.
std::string forced_close_text(const ReasoningSyntax& syntax);

// OpenAI's reasoning_effort as a budget of thinking tokens: "low" 512, "medium" 2048,
// "high" none (nullopt); "none" turns thinking off (enable_thinking false) instead.
std::optional<int64_t> effort_budget(const std::string& effort);

}  // namespace loom::serve
