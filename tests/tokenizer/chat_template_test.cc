// ChatTemplate's contract beyond rendering parity: the variables it provides,
// input validation, clocks, key order and errors.
#include "loom/tokenizer/chat_template.h"

#include <gtest/gtest.h>

namespace loom::tok {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

const char* kChatMl =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

TEST(ChatTemplate, AppliesMessagesAndGenerationPrompt) {
  auto ct = ChatTemplate::create(kChatMl, "", "<|im_end|>");
  ASSERT_TRUE(ct.ok()) << ct.status().to_string();
  json messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  EXPECT_EQ(ct->apply(messages, false).value(), "<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(ct->apply(messages, true).value(), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, ProvidesTransformersVariables) {
  auto ct = ChatTemplate::create(
      "{{ bos_token }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}|{{ unk_token is defined }}|"
      "{{ enable_thinking }}",
      "<s>", "</s>");
  ASSERT_TRUE(ct.ok());
  EXPECT_EQ(ct->apply(json::array(), false).value(), "<s>|</s>|True|True|False|");
  EXPECT_EQ(ct->apply(json::array(), false, json{{"enable_thinking", false}, {"tools", json::array()}}).value(),
            "<s>|</s>|False|True|False|False");
  // An empty special token is absent, as Transformers omits unset tokens.
  auto no_bos = ChatTemplate::create("{{ bos_token is defined }}", "", "</s>");
  ASSERT_TRUE(no_bos.ok());
  EXPECT_EQ(no_bos->apply(json::array(), false).value(), "False");
}

TEST(ChatTemplate, OrderedJsonKeepsToolSchemaKeyOrder) {
  auto ct = ChatTemplate::create("{{ tools[0]|tojson }}", "", "");
  ASSERT_TRUE(ct.ok());
  const std::string schema = R"({"type": "function", "function": {"name": "f", "description": "d"}})";
  ordered_json extra_ordered{{"tools", ordered_json::array({ordered_json::parse(schema)})}};
  EXPECT_EQ(ct->apply(ordered_json::array(), false, extra_ordered).value(), schema);
  // nlohmann::json stores keys sorted; the template sees them that way.
  json extra_sorted{{"tools", json::array({json::parse(schema)})}};
  EXPECT_EQ(ct->apply(json::array(), false, extra_sorted).value(),
            R"({"function": {"description": "d", "name": "f"}, "type": "function"})");
}

TEST(ChatTemplate, StrftimeNowUsesTheClock) {
  auto ct = ChatTemplate::create("{{ strftime_now('%Y') }}", "", "");
  ASSERT_TRUE(ct.ok());
  ct->set_clock([] { return int64_t{4102444800 + 86400 * 10}; });  // mid-January 2100
  EXPECT_EQ(ct->apply(json::array(), false).value(), "2100");
  ct->set_clock(nullptr);
  const std::string year = ct->apply(json::array(), false).value();
  EXPECT_EQ(year.size(), 4u);
  EXPECT_GE(std::stoi(year), 2024);
}

TEST(ChatTemplate, RejectsMalformedInputWithClearErrors) {
  auto ct = ChatTemplate::create(kChatMl, "", "");
  ASSERT_TRUE(ct.ok());
  auto r = ct->apply(json::object(), false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("messages must be a JSON array"), std::string::npos);
  r = ct->apply(json::array({"just a string"}), false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("messages[0] must be an object"), std::string::npos);
  r = ct->apply(json::array(), false, json::array());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("extra variables must be a JSON object"), std::string::npos);
}

TEST(ChatTemplate, TemplateErrorsSurfaceWithContext) {
  auto bad = ChatTemplate::create("{% for m in messages %}{{ m.content }}", "", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kParseError);
  EXPECT_NE(bad.status().message().find("chat template"), std::string::npos);
  EXPECT_NE(bad.status().message().find("unclosed 'for'"), std::string::npos);

  auto gemma_like = ChatTemplate::create(
      "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}ok", "",
      "");
  ASSERT_TRUE(gemma_like.ok());
  auto r = gemma_like->apply(json::array({{{"role", "system"}, {"content", "x"}}}), false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("System role not supported"), std::string::npos) << r.status().message();
  EXPECT_EQ(gemma_like->apply(json::array({{{"role", "user"}, {"content", "x"}}}), false).value(), "ok");
}

}  // namespace
}  // namespace loom::tok
