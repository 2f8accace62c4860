// Reasoning sections: detection from real chat templates, the split of whole replies,
// and of growing ones (every prefix's split extends the previous one and ends at the
// whole reply's); the Messages and Responses requests translated into chat requests,
// with errors naming the field.
#include "serve/reasoning.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "serve/protocol_messages.h"

namespace loom::serve {
namespace {

using ojson = nlohmann::ordered_json;

std::string thinking_template(const std::string& name) {
  std::ifstream f(std::string(LOOM_SOURCE_DIR) + "/tests/reference/chat_templates/templates/" + name + ".jinja");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(Reasoning, DetectedFromTemplates) {
  EXPECT_TRUE(detect_reasoning(thinking_template("qwen3")).thinks());
  EXPECT_TRUE(detect_reasoning(thinking_template("deepseek_r1_distill_qwen")).thinks());
  EXPECT_FALSE(detect_reasoning(thinking_template("llama3_1")).thinks());
  EXPECT_FALSE(detect_reasoning(thinking_template("qwen2_5")).thinks());
  const ReasoningSyntax s = detect_reasoning(thinking_template("qwen3"));
  EXPECT_TRUE(prompt_opens_reasoning(s, "<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning(s, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning(s, "<|im_start|>assistant\n"));
}

TEST(Reasoning, WholeReplies) {
  const ReasoningSyntax s = detect_reasoning("<think></think>");
  SplitReply r = split_reasoning(s, "<think>\nI ponder.\n</think>\n\nThe answer.", false, true);
  EXPECT_TRUE(r.reasoned);
  EXPECT_EQ(r.reasoning, "I ponder.");
  EXPECT_EQ(r.content, "The answer.");
  r = split_reasoning(s, "I ponder.\n</think>\n\nThe answer.", true, true);
  EXPECT_EQ(r.reasoning, "I ponder.");
  EXPECT_EQ(r.content, "The answer.");
  r = split_reasoning(s, "Just an answer.", false, true);
  EXPECT_FALSE(r.reasoned);
  EXPECT_EQ(r.content, "Just an answer.");
  r = split_reasoning(s, "still thinking </thi", true, true);  // never closed: all reasoning
  EXPECT_EQ(r.reasoning, "still thinking </thi");
  EXPECT_EQ(r.content, "");
  r = split_reasoning(ReasoningSyntax{}, "<think>x</think>y", false, true);  // a template that does not think
  EXPECT_FALSE(r.reasoned);
  EXPECT_EQ(r.content, "<think>x</think>y");
}

TEST(Reasoning, GrowingRepliesExtendEachOther) {
  const ReasoningSyntax s = detect_reasoning("<think></think>");
  for (const bool open : {false, true}) {
    for (const std::string text : {std::string("<think>\nA b </c.\n\n</think>\n\n  Answer </think> here."),
                                   std::string("  <thin"), std::string("plain </think> text"),
                                   std::string("\n<think>never closed\n")}) {
      const std::string full = open && text.rfind("<think>", 0) == 0 ? text.substr(7) : text;
      const SplitReply whole = split_reasoning(s, full, open, true);
      std::string prev_r, prev_c;
      for (size_t n = 0; n <= full.size(); ++n) {
        const SplitReply part = split_reasoning(s, full.substr(0, n), open, false);
        EXPECT_EQ(part.reasoning.substr(0, prev_r.size()), prev_r) << full << " @" << n;
        EXPECT_EQ(part.content.substr(0, prev_c.size()), prev_c) << full << " @" << n;
        EXPECT_EQ(whole.reasoning.substr(0, part.reasoning.size()), part.reasoning) << full << " @" << n;
        EXPECT_EQ(whole.content.substr(0, part.content.size()), part.content) << full << " @" << n;
        prev_r = part.reasoning;
        prev_c = part.content;
      }
    }
  }
}

TEST(Reasoning, EffortBudgets) {
  EXPECT_EQ(effort_budget("low"), 512);
  EXPECT_EQ(effort_budget("medium"), 2048);
  EXPECT_EQ(effort_budget("high"), std::nullopt);
  const batching::ThinkingBudget b = thinking_budget(detect_reasoning("<think></think>"), 7, true, {1, 2});
  EXPECT_EQ(b.after_tokens, 7);
  EXPECT_EQ(b.close, "</think>");
  EXPECT_TRUE(b.open_at_start);
}

TEST(MessagesRequest, TranslatesToChat) {
  const ojson body = {
      {"model", "m"},
      {"max_tokens", 16},
      {"system", ojson::array({{{"type", "text"}, {"text", "Be brief."}}})},
      {"stop_sequences", {"END"}},
      {"tools", {{{"name", "get_weather"}, {"description", "d"}, {"input_schema", {{"type", "object"}}}}}},
      {"tool_choice", {{"type", "any"}, {"disable_parallel_tool_use", true}}},
      {"thinking", {{"type", "enabled"}, {"budget_tokens", 32}}},
      {"messages",
       {{{"role", "user"}, {"content", "Weather?"}},
        {{"role", "assistant"},
         {"content", {{{"type", "thinking"}, {"thinking", "hmm"}, {"signature", ""}},
                      {{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "get_weather"}, {"input", {{"city", "Paris"}}}}}}},
        {{"role", "user"},
         {"content", {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", "sunny"}},
                      {{"type", "text"}, {"text", "And?"}}}}}}}};
  Parsed<MessagesRequest> p = parse_messages_request(body.dump());
  ASSERT_TRUE(p.ok()) << p.error.message;
  const ChatCompletionRequest& c = p.value->chat;
  EXPECT_EQ(c.max_tokens, 16);
  EXPECT_EQ(c.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(c.tool_choice.mode, ToolChoice::Mode::kRequired);
  EXPECT_FALSE(c.parallel_tool_calls);
  EXPECT_EQ(c.max_thinking_tokens, 32);
  EXPECT_EQ(c.chat_template_kwargs["enable_thinking"], true);
  ASSERT_EQ(c.messages.size(), 5u);
  EXPECT_EQ(c.messages[0]["role"], "system");
  EXPECT_EQ(c.messages[2]["reasoning_content"], "hmm");
  EXPECT_EQ(c.messages[2]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(c.messages[3]["role"], "tool");
  EXPECT_EQ(c.messages[3]["tool_call_id"], "toolu_1");
  EXPECT_EQ(c.messages[4]["content"], "And?");
}

TEST(MessagesRequest, ErrorsNameTheField) {
  auto param = [](const ojson& body) {
    Parsed<MessagesRequest> p = parse_messages_request(body.dump());
    EXPECT_FALSE(p.ok()) << body.dump();
    return p.error.param;
  };
  const ojson user = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(param({{"messages", user}}), "max_tokens");
  EXPECT_EQ(param({{"max_tokens", 4}}), "messages");
  EXPECT_EQ(param({{"max_tokens", 4}, {"messages", user}, {"temperature", 1.5}}), "temperature");
  EXPECT_EQ(param({{"max_tokens", 4}, {"messages", user}, {"stop_sequences", "x"}}), "stop_sequences");
  EXPECT_EQ(param({{"max_tokens", 4}, {"messages", {{{"role", "user"}, {"content", {{{"type", "image"}}}}}}}}),
            "messages[0].content[0].type");
  EXPECT_EQ(param({{"max_tokens", 4}, {"messages", user}, {"tool_choice", {{"type", "bogus"}}}}), "tool_choice");
  EXPECT_EQ(param({{"max_tokens", 4}, {"messages", user}, {"thinking", {{"type", "enabled"}}}}), "thinking.budget_tokens");
  EXPECT_EQ(param({{"max_tokens", 4}, {"messages", {{{"role", "system"}, {"content", "x"}}}}}), "messages[0].role");
  Parsed<MessagesRequest> counted = parse_messages_request(ojson{{"messages", user}}.dump(), /*count_tokens=*/true);
  EXPECT_TRUE(counted.ok());
  const ojson e = anthropic_error_json(ApiError{401, "bad key", "invalid_request_error", "", ""});
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["type"], "authentication_error");
}

TEST(ResponsesRequest, TranslatesToChat) {
  const ojson stored = ojson::array({{{"role", "user"}, {"content", "first"}}, {{"role", "assistant"}, {"content", "reply"}}});
  auto previous = [&](const std::string& id) -> std::optional<ojson> {
    if (id == "resp_1") return stored;
    return std::nullopt;
  };
  const ojson body = {
      {"instructions", "Be brief."},
      {"previous_response_id", "resp_1"},
      {"max_output_tokens", 8},
      {"reasoning", {{"effort", "low"}}},
      {"text", {{"format", {{"type", "json_schema"}, {"name", "x"}, {"schema", {{"type", "object"}}}}}}},
      {"input",
       {{{"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "call it"}}}}},
        {{"type", "function_call"}, {"call_id", "call_1"}, {"name", "f"}, {"arguments", "{\"a\":1}"}},
        {{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", "2"}}}}};
  Parsed<ResponsesRequest> p = parse_responses_request(body.dump(), previous);
  ASSERT_TRUE(p.ok()) << p.error.message;
  const ChatCompletionRequest& c = p.value->chat;
  EXPECT_EQ(c.max_tokens, 8);
  EXPECT_EQ(c.reasoning_effort, "low");
  ASSERT_TRUE(c.constraint.has_value());
  ASSERT_EQ(c.messages.size(), 6u);
  EXPECT_EQ(c.messages[0]["role"], "system");
  EXPECT_EQ(c.messages[2]["content"], "reply");
  EXPECT_EQ(c.messages[4]["tool_calls"][0]["function"]["arguments"]["a"], 1);
  EXPECT_EQ(c.messages[5]["role"], "tool");
  EXPECT_EQ(p.value->input_messages.size(), 5u);  // instructions are not carried over

  auto error = [&](const ojson& b) {
    Parsed<ResponsesRequest> q = parse_responses_request(b.dump(), previous);
    EXPECT_FALSE(q.ok()) << b.dump();
    return q.error;
  };
  EXPECT_EQ(error({{"model", "m"}}).param, "input");
  EXPECT_EQ(error({{"input", "x"}, {"previous_response_id", "resp_2"}}).status, 404);
  EXPECT_EQ(error({{"input", {{{"type", "item_reference"}, {"id", "x"}}}}}).param, "input[0].type");
  EXPECT_EQ(error({{"input", "x"}, {"tools", {{{"type", "web_search"}}}}}).param, "tools[0].type");
  EXPECT_EQ(error({{"input", "x"}, {"max_output_tokens", 0}}).param, "max_output_tokens");
  EXPECT_EQ(error({{"input", "x"}, {"reasoning", {{"effort", "huge"}}}}).param, "reasoning.effort");
  EXPECT_EQ(error({{"input", "x"}, {"text", {{"format", {{"type", "yaml"}}}}}}).param, "text.format.type");
}

}  // namespace
}  // namespace loom::serve
