// parse_harmony_reply on replies as gpt-oss writes them after its template's
// `<|start|>assistant`: reasoning, final answer and tool calls apart, every prefix
// of a reply parsing to a prefix of each field (streaming), text with no Harmony
// marker left as content.
#include <gtest/gtest.h>

#include "loom/tokenizer/harmony.h"

namespace loom::tokenizer {
namespace {

TEST(Harmony, AnalysisThenFinal) {
  const HarmonyReply r = parse_harmony_reply(
      "<|channel|>analysis<|message|>User asks 2+2. Simple.<|end|><|start|>assistant<|channel|>final<|message|>"
      "2 + 2 = 4.<|return|>");
  EXPECT_EQ(r.reasoning, "User asks 2+2. Simple.");
  EXPECT_EQ(r.content, "2 + 2 = 4.");
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.finish, "stop");
}

TEST(Harmony, ToolCallInEitherHeaderPosition) {
  const HarmonyReply a = parse_harmony_reply(
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"location\": \"Tokyo\"}<|call|>");
  EXPECT_EQ(a.reasoning, "Need the weather.");
  EXPECT_EQ(a.content, "");
  ASSERT_EQ(a.tool_calls.size(), 1u);
  EXPECT_EQ(a.tool_calls[0].name, "get_weather");
  EXPECT_EQ(a.tool_calls[0].arguments, "{\"location\": \"Tokyo\"}");
  EXPECT_EQ(a.finish, "tool_calls");
  const HarmonyReply b = parse_harmony_reply(
      "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{\"q\":1}<|call|>");
  ASSERT_EQ(b.tool_calls.size(), 1u);
  EXPECT_EQ(b.tool_calls[0].name, "lookup");
  EXPECT_EQ(b.tool_calls[0].arguments, "{\"q\":1}");
}

TEST(Harmony, PreambleIsContentAndPlainTextIsContent) {
  const HarmonyReply r = parse_harmony_reply(
      "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>final<|message|>Done."
      "<|return|>");
  EXPECT_EQ(r.content, "Let me check.\nDone.");
  EXPECT_EQ(parse_harmony_reply("no markers at all").content, "no markers at all");
  EXPECT_EQ(parse_harmony_reply("").content, "");
}

TEST(Harmony, EveryPrefixParsesToPrefixesOfTheWholeReply) {
  const std::string reply =
      "<|channel|>analysis<|message|>Think <|about|> it.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.f <|constrain|>json<|message|>{\"x\": [1, 2]}<|call|>";
  const HarmonyReply whole = parse_harmony_reply(reply);
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.reasoning, "Think <|about|> it.");
  for (size_t n = 0; n <= reply.size(); ++n) {
    const HarmonyReply part = parse_harmony_reply(std::string_view(reply).substr(0, n));
    EXPECT_EQ(whole.reasoning.compare(0, part.reasoning.size(), part.reasoning), 0) << n << ": " << part.reasoning;
    EXPECT_EQ(whole.content.compare(0, part.content.size(), part.content), 0) << n << ": " << part.content;
    ASSERT_LE(part.tool_calls.size(), 1u) << n;
    if (!part.tool_calls.empty()) {
      EXPECT_EQ(part.tool_calls[0].name, "f") << n;
      const std::string& args = part.tool_calls[0].arguments;
      EXPECT_EQ(whole.tool_calls[0].arguments.compare(0, args.size(), args), 0) << n << ": " << args;
    }
    if (n < reply.size()) EXPECT_EQ(part.finish, "") << n;
  }
  EXPECT_EQ(whole.finish, "tool_calls");
}

TEST(Harmony, RecognisesHarmonyTemplates) {
  EXPECT_TRUE(is_harmony_template("{{ '<|start|>' + role + '<|channel|>final<|message|>' }}"));
  EXPECT_FALSE(is_harmony_template("{{ '<|im_start|>' + role }}"));
}

}  // namespace
}  // namespace loom::tokenizer
