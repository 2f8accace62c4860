#include "serve/reasoning.h"

namespace loom::serve {

namespace {

bool is_blank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim_front(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  return s;
}

std::string_view trim_back(std::string_view s) {
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// The longest suffix of `s` that is a proper prefix of `tag`: bytes that may still
// turn out to be the tag.
size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

ReasoningSyntax detect_reasoning(std::string_view chat_template) {
  ReasoningSyntax s;
  if (chat_template.find("<think>") != std::string_view::npos && chat_template.find("</think>") != std::string_view::npos) {
    s.format = ReasoningFormat::kThinkTags;
    s.open = "<think>";
    s.close = "</think>";
  }
  return s;
}

bool prompt_opens_reasoning(const ReasoningSyntax& syntax, std::string_view rendered_prompt) {
  if (!syntax.thinks()) return false;
  const std::string_view tail = trim_back(rendered_prompt);
  return tail.size() >= syntax.open.size() && tail.substr(tail.size() - syntax.open.size()) == syntax.open;
}

SplitReply split_reasoning(const ReasoningSyntax& syntax, std::string_view text, bool started_open, bool final) {
  SplitReply out;
  if (!syntax.thinks()) {
    out.content = std::string(text);
    return out;
  }
  std::string_view rest = text;
  if (!started_open) {
    const std::string_view lead = trim_front(text);
    if (lead.substr(0, syntax.open.size()) == syntax.open) {
      rest = lead.substr(syntax.open.size());
    } else if (!final && syntax.open.substr(0, lead.size()) == lead) {
      return out;  // nothing yet, or the open tag's first bytes
    } else {
      out.content = std::string(text);
      return out;
    }
  }
  out.reasoned = true;
  rest = trim_front(rest);
  const size_t close = rest.find(syntax.close);
  if (close == std::string_view::npos) {
    std::string_view thought = rest;
    if (!final) thought.remove_suffix(partial_tag_suffix(thought, syntax.close));
    out.reasoning = std::string(trim_back(thought));  // trailing blanks may precede the close tag
    return out;
  }
  out.reasoning = std::string(trim_back(rest.substr(0, close)));
  out.content = std::string(trim_front(rest.substr(close + syntax.close.size())));
  return out;
}

std::string forced_close_text(const ReasoningSyntax& syntax) { return "\n" + syntax.close + "\n\n"; }

batching::ThinkingBudget thinking_budget(const ReasoningSyntax& syntax, int64_t tokens, bool started_open,
                                         std::vector<int32_t> close_ids) {
  batching::ThinkingBudget b;
  b.after_tokens = tokens;
  b.open = syntax.open;
  b.close = syntax.close;
  b.open_at_start = started_open;
  b.close_ids = std::move(close_ids);
  return b;
}

std::optional<int64_t> effort_budget(const std::string& effort) {
  if (effort == "minimal") return 0;
  if (effort == "low") return 512;
  if (effort == "medium") return 2048;
  return std::nullopt;
}

}  // namespace loom::serve
