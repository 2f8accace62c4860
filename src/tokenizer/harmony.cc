#include "loom/tokenizer/harmony.h"

#include <array>

namespace loom::tokenizer {
namespace harmony_impl {

constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>", kMessage = "<|message|>",
                           kEnd = "<|end|>", kReturn = "<|return|>", kCall = "<|call|>";

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

// The length of the longest suffix of `s` that is a proper prefix of a marker: an
// unterminated body may end in the first characters of its terminator.
size_t partial_marker_tail(std::string_view s) {
  static constexpr std::array<std::string_view, 5> kTerminators = {kEnd, kReturn, kCall, kStart, kChannel};
  size_t best = 0;
  for (std::string_view m : kTerminators)
    for (size_t n = std::min(m.size() - 1, s.size()); n > best; --n)
      if (s.substr(s.size() - n) == m.substr(0, n)) {
        best = n;
        break;
      }
  return best;
}

// The recipient in a header ("to=functions.get_weather"), or empty.
std::string_view recipient_in(std::string_view header) {
  const size_t at = header.find("to=");
  if (at == std::string_view::npos || (at > 0 && header[at - 1] != ' ' && header[at - 1] != '>')) return {};
  std::string_view r = header.substr(at + 3);
  const size_t end = r.find_first_of(" <");
  return end == std::string_view::npos ? r : r.substr(0, end);
}

void append(std::string& field, std::string_view body) {
  if (!field.empty() && !body.empty()) field += '\n';
  field.append(body);
}

}  // namespace harmony_impl

bool is_harmony_template(std::string_view chat_template) {
  return chat_template.find(harmony_impl::kChannel) != std::string_view::npos && chat_template.find(harmony_impl::kMessage) != std::string_view::npos;
}

HarmonyReply parse_harmony_reply(std::string_view text) {
  HarmonyReply r;
  if (text.find(harmony_impl::kMessage) == std::string_view::npos && text.find(harmony_impl::kChannel) == std::string_view::npos &&
      text.find(harmony_impl::kStart) == std::string_view::npos) {
    // Plain text; its end may be the first characters of a header still coming.
    r.content = std::string(text.substr(0, text.size() - harmony_impl::partial_marker_tail(text)));
    return r;
  }
  std::string_view rest = text;
  while (!rest.empty()) {
    if (harmony_impl::starts_with(rest, harmony_impl::kStart)) rest.remove_prefix(harmony_impl::kStart.size());
    const size_t body_at = rest.find(harmony_impl::kMessage);
    if (body_at == std::string_view::npos) break;  // a header still being generated
    const std::string_view header = rest.substr(0, body_at);
    rest.remove_prefix(body_at + harmony_impl::kMessage.size());
    std::string_view channel;
    if (const size_t c = header.find(harmony_impl::kChannel); c != std::string_view::npos) {
      channel = header.substr(c + harmony_impl::kChannel.size());
      channel = channel.substr(0, channel.find_first_of(" <"));
    }
    const std::string_view recipient = harmony_impl::recipient_in(header);
    // The body runs to the first terminator (or the end of the text so far).
    size_t end = std::string_view::npos;
    std::string_view terminator;
    for (std::string_view t : {harmony_impl::kEnd, harmony_impl::kReturn, harmony_impl::kCall, harmony_impl::kStart}) {
      const size_t at = rest.find(t);
      if (at < end) {
        end = at;
        terminator = t;
      }
    }
    std::string_view body = rest.substr(0, end);
    if (end == std::string_view::npos) body.remove_suffix(harmony_impl::partial_marker_tail(body));
    if (!recipient.empty()) {
      if (harmony_impl::starts_with(recipient, "functions.")) {
        HarmonyToolCall call;
        call.name = std::string(recipient.substr(std::string_view("functions.").size()));
        call.arguments = std::string(harmony_impl::trim(body));
        r.tool_calls.push_back(std::move(call));
      }
      // Other recipients (built-in tools such as browser.*) are not the client's to run.
    } else if (channel == "analysis") {
      harmony_impl::append(r.reasoning, body);
    } else {
      harmony_impl::append(r.content, body);
    }
    r.finish.clear();
    if (end == std::string_view::npos) break;
    if (terminator == harmony_impl::kReturn) r.finish = "stop";
    else if (terminator == harmony_impl::kCall) r.finish = "tool_calls";
    rest.remove_prefix(end + (terminator == harmony_impl::kStart ? 0 : terminator.size()));
    if (terminator == harmony_impl::kReturn || terminator == harmony_impl::kCall) break;
  }
  return r;
}

}  // namespace loom::tokenizer
