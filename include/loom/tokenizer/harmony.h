// gpt-oss's Harmony chat format, the reply side: what a gpt-oss model generates
// after the prompt its chat template renders (which ends in `<|start|>assistant`)
// split into what an OpenAI-style API returns. The one function a server or CLI
// needs; nothing else in loom depends on Harmony.
//
// A reply is a sequence of messages
//   [<|start|>assistant][ to=RECIPIENT]<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>TYPE | TYPE]<|message|>BODY END
// where END is <|end|> (more messages follow), <|return|> (the reply is done) or
// <|call|> (a tool call: the caller runs it and continues the conversation); the
// first message's `<|start|>assistant` is already in the prompt. Bodies go to:
//   - channel `analysis`                          → reasoning (reasoning_content);
//   - a recipient `functions.NAME` (any channel)  → a tool call NAME with the body as its
//                                                   arguments (OpenAI tool_calls);
//   - channel `final`, or `commentary` without a
//     recipient (a preamble to the user)          → content.
// Several bodies of one kind are joined with "\n". The text must be decoded with
// the special tokens kept (they are the structure). A text without any Harmony
// marker is all content. A prefix of a reply (streaming) parses to a prefix of
// the full reply's fields: an unterminated last body counts as far as it goes
// (minus any trailing part of a marker), so parsing the text so far after each
// token and sending the growth of each field streams the same result.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace loom::tokenizer {

struct HarmonyToolCall {
  std::string name;       // without the "functions." namespace
  std::string arguments;  // the body as the model wrote it (JSON for json-constrained calls)
};

struct HarmonyReply {
  std::string reasoning;  // analysis channel
  std::string content;    // final channel (and commentary addressed to no one)
  std::vector<HarmonyToolCall> tool_calls;
  // "stop": <|return|> ended the reply; "tool_calls": <|call|> did; "" otherwise
  // (the text ends inside a message, or after <|end|> with no further message).
  std::string finish;
};

HarmonyReply parse_harmony_reply(std::string_view text);

// True when a chat template renders Harmony (it writes `<|channel|>` headers), so a
// front end knows to parse replies with parse_harmony_reply.
bool is_harmony_template(std::string_view chat_template);

}  // namespace loom::tokenizer
