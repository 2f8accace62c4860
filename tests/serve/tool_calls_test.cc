// Tool calls: family detection from real chat templates, the parser on replies written
// in each family's format (complete, partial while streaming, malformed), the grammar of
// a forced call, and the request fields (tools, tool_choice, response_format,
// structured_outputs, guided_*) with errors naming the field.
#include "serve/tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "loom/structured/constraint.h"
#include "loom/structured/grammar_matcher.h"

namespace loom::serve {
namespace {

using ojson = nlohmann::ordered_json;

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/tests/reference/chat_templates/templates/" + name + ".jinja");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"$ref": "#/$defs/num"}}, "$defs": {"num": {"type": "integer"}}}}}])");

TEST(ToolCalls, FamilyComesFromTheTemplateText) {
  EXPECT_EQ(detect_tool_call_format(read_template("llama3_1")), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(detect_tool_call_format(read_template("llama3_2")), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(detect_tool_call_format(read_template("qwen2_5")), ToolCallFormat::kHermesTags);
  EXPECT_EQ(detect_tool_call_format(read_template("qwen3")), ToolCallFormat::kHermesTags);
  EXPECT_EQ(detect_tool_call_format(read_template("gemma2")), ToolCallFormat::kUnknown);
  EXPECT_EQ(detect_tool_call_format(read_template("llama3")), ToolCallFormat::kUnknown);  // Llama 3.0: no tools
}

TEST(ToolCalls, HermesTagsParse) {
  const std::string reply =
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";
  ParsedReply p = parse_tool_calls(ToolCallFormat::kHermesTags, reply, kTools, true);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(ojson::parse(p.calls[0].arguments), ojson::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(p.calls[1].name, "add");
  EXPECT_EQ(ojson::parse(p.calls[1].arguments), ojson::parse(R"({"a": 1, "b": 2})"));
  ASSERT_TRUE(p.content);
  EXPECT_EQ(*p.content, "Let me look.");

  ParsedReply only = parse_tool_calls(ToolCallFormat::kHermesTags,
                                      "<tool_call>\n{\"name\": \"add\", \"arguments\": {}}\n</tool_call>", kTools, true);
  ASSERT_EQ(only.calls.size(), 1u);
  EXPECT_FALSE(only.content);  // only calls: content is null
}

TEST(ToolCalls, HermesMalformedCallsStayText) {
  for (const char* reply : {"<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",  // undeclared
                            "<tool_call>\n{\"name\": \"add\", \"arguments\": {\n</tool_call>",      // bad JSON
                            "<tool_call>\n{\"name\": \"add\", \"arguments\": {}}",                  // unclosed
                            "plain text"}) {
    ParsedReply p = parse_tool_calls(ToolCallFormat::kHermesTags, reply, kTools, true);
    EXPECT_TRUE(p.calls.empty()) << reply;
    ASSERT_TRUE(p.content);
    EXPECT_EQ(*p.content, reply);
  }
}

TEST(ToolCalls, Llama3JsonParse) {
  ParsedReply p = parse_tool_calls(ToolCallFormat::kLlama3Json,
                                   "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"unit\": \"c\"}}",
                                   kTools, true);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Oslo","unit":"c"})");
  EXPECT_FALSE(p.content);

  ParsedReply two = parse_tool_calls(ToolCallFormat::kLlama3Json,
                                     "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1}}; "
                                     "{\"name\": \"add\", \"parameters\": {\"a\": \"x;}\"}}",
                                     kTools, true);
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.calls[1].arguments, R"({"a":"x;}"})");

  for (const char* reply : {"The weather is fine.", "{\"name\": \"nope\", \"parameters\": {}}",
                            "{\"name\": \"add\", \"parameters\": {}} and more", "{\"name\": \"add\""}) {
    ParsedReply t = parse_tool_calls(ToolCallFormat::kLlama3Json, reply, kTools, true);
    EXPECT_TRUE(t.calls.empty()) << reply;
    ASSERT_TRUE(t.content);
    EXPECT_EQ(*t.content, reply);
  }
}

// Every prefix of a reply, parsed as a stream would, gives results that extend each
// other (content, the calls, each call's name and arguments) and end in the final
// parse: what the streamed deltas add up to.
void expect_monotone(ToolCallFormat f, const std::string& reply, bool forced = false) {
  auto parse = [&](std::string_view text, bool final) {
    return forced ? parse_forced_tool_call(f, text, final) : parse_tool_calls(f, text, kTools, final);
  };
  std::string content;
  std::vector<ToolCall> calls;  // complete ones and the partial one
  for (size_t n = 0; n <= reply.size(); ++n) {
    const bool final = n == reply.size();
    ParsedReply p = parse(std::string_view(reply).substr(0, n), final);
    const std::string c = p.content.value_or("");
    ASSERT_EQ(c.substr(0, content.size()), content) << "prefix " << n << " of " << reply;
    std::vector<ToolCall> now = p.calls;
    if (p.partial) now.push_back(*p.partial);
    ASSERT_GE(now.size(), calls.size()) << "prefix " << n;
    for (size_t k = 0; k < calls.size(); ++k) {
      ASSERT_EQ(now[k].name, calls[k].name) << "prefix " << n;
      ASSERT_EQ(now[k].arguments.substr(0, calls[k].arguments.size()), calls[k].arguments) << "prefix " << n;
    }
    content = c;
    calls = now;
  }
  ParsedReply whole = parse(reply, true);
  EXPECT_EQ(content, whole.content.value_or(""));
  ASSERT_EQ(calls.size(), whole.calls.size());
  for (size_t k = 0; k < calls.size(); ++k) EXPECT_EQ(calls[k].arguments, whole.calls[k].arguments);
}

TEST(ToolCalls, PartialRepliesOnlyGrow) {
  expect_monotone(ToolCallFormat::kHermesTags,
                  "Sure. \n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<tool_call>\n"
                  "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"<tool\"}}\n</tool_call>");
  expect_monotone(ToolCallFormat::kHermesTags, "No call here, only <tool text and </tool_call> tags.");
  expect_monotone(ToolCallFormat::kHermesTags, "<tool_call>\n{\"name\": \"zzz\"}\n</tool_call> then text");
  expect_monotone(ToolCallFormat::kLlama3Json, "{\"name\": \"add\", \"parameters\": {\"a\": 1}}");
  expect_monotone(ToolCallFormat::kLlama3Json, "  {not a call} at all");
  expect_monotone(ToolCallFormat::kLlama3Json, "Hello there");
}

TEST(ToolCalls, ForcedCallArgumentsStreamAsWritten) {
  const std::string hermes =
      "<tool_call>\n{ \"name\": \"get_weather\", \"arguments\": { \"city\": \"a}b{\", \"n\": {\"x\": [1, {}]} } }\n</tool_call>";
  expect_monotone(ToolCallFormat::kHermesTags, hermes, /*forced=*/true);
  ParsedReply h = parse_forced_tool_call(ToolCallFormat::kHermesTags, hermes, true);
  ASSERT_EQ(h.calls.size(), 1u);
  EXPECT_FALSE(h.content);
  EXPECT_EQ(h.calls[0].name, "get_weather");
  EXPECT_EQ(h.calls[0].arguments, R"({ "city": "a}b{", "n": {"x": [1, {}]} })");
  // Partway, the arguments written so far (braces inside strings do not close them;
  // trailing space is held back, it may yet be inside a string).
  ParsedReply mid = parse_forced_tool_call(ToolCallFormat::kHermesTags, hermes.substr(0, hermes.find("\"n\"")), false);
  ASSERT_TRUE(mid.partial);
  EXPECT_EQ(mid.partial->name, "get_weather");
  EXPECT_EQ(mid.partial->arguments, R"({ "city": "a}b{",)");
  // The arguments closed, the call not yet: they are whole.
  ParsedReply closed = parse_forced_tool_call(ToolCallFormat::kHermesTags, hermes.substr(0, hermes.rfind("} }") + 1), false);
  ASSERT_TRUE(closed.partial);
  EXPECT_EQ(closed.partial->arguments, R"({ "city": "a}b{", "n": {"x": [1, {}]} })");

  const std::string llama = "{\"name\": \"add\", \"parameters\": {\"a\": 12, \"b\": 3}}";
  expect_monotone(ToolCallFormat::kLlama3Json, llama, /*forced=*/true);
  ParsedReply l = parse_forced_tool_call(ToolCallFormat::kLlama3Json, llama, true);
  ASSERT_EQ(l.calls.size(), 1u);
  EXPECT_EQ(l.calls[0].arguments, R"({"a": 12, "b": 3})");
  // Cut by max_tokens: the call keeps what was written.
  ParsedReply cut = parse_forced_tool_call(ToolCallFormat::kLlama3Json, llama.substr(0, 40), true);
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.calls[0].arguments, R"({"a": 12,)");
}

// The grammar of a forced call accepts exactly the family's call shape with arguments
// matching the tool's schema.
bool grammar_accepts(const RequestedConstraint& c, const std::string& text) {
  Result<structured::Grammar> g = structured::spec_to_grammar(c.spec);
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return false;
  structured::CompiledGrammar compiled(std::move(*g));
  return structured::grammar_matches(compiled, text);
}

TEST(ToolCalls, SeveralForcedCallsParseAndStream) {
  const std::string hermes =
      "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"</tool_call>;\"}}\n</tool_call>";
  expect_monotone(ToolCallFormat::kHermesTags, hermes, /*forced=*/true);
  ParsedReply h = parse_forced_tool_call(ToolCallFormat::kHermesTags, hermes, true);
  ASSERT_EQ(h.calls.size(), 2u);
  EXPECT_FALSE(h.content);
  EXPECT_EQ(h.calls[0].name, "add");
  EXPECT_EQ(h.calls[0].arguments, R"({"a": 1, "b": 2})");
  EXPECT_EQ(h.calls[1].name, "get_weather");
  EXPECT_EQ(h.calls[1].arguments, R"({"city": "</tool_call>;"})");

  const std::string llama =
      "{\"name\": \"add\", \"parameters\": {\"a\": 1}}; {\"name\": \"get_weather\", \"parameters\": {\"city\": \"x;y\"}}";
  expect_monotone(ToolCallFormat::kLlama3Json, llama, /*forced=*/true);
  ParsedReply l = parse_forced_tool_call(ToolCallFormat::kLlama3Json, llama, true);
  ASSERT_EQ(l.calls.size(), 2u);
  EXPECT_EQ(l.calls[1].name, "get_weather");
  EXPECT_EQ(l.calls[1].arguments, R"({"city": "x;y"})");
  // Cut inside the second call: the first is whole, the second keeps what was written.
  ParsedReply cut = parse_forced_tool_call(ToolCallFormat::kLlama3Json, llama.substr(0, llama.size() - 5), true);
  ASSERT_EQ(cut.calls.size(), 2u);
  EXPECT_EQ(cut.calls[0].arguments, R"({"a": 1})");
  EXPECT_EQ(cut.calls[1].arguments, R"({"city": "x)");

  ParsedReply first = parse_forced_tool_call(ToolCallFormat::kLlama3Json, llama, true);
  keep_first_call(&first);
  ASSERT_EQ(first.calls.size(), 1u);
  EXPECT_EQ(first.calls[0].name, "add");
}

TEST(ToolCalls, ForcedCallGrammar) {
  RequestedConstraint hermes;
  ASSERT_FALSE(forced_tool_call_constraint(ToolCallFormat::kHermesTags, kTools, "", /*several=*/false, &hermes));
  EXPECT_TRUE(grammar_accepts(hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"));
  EXPECT_TRUE(grammar_accepts(hermes, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>"));
  EXPECT_FALSE(grammar_accepts(hermes, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"b\": \"x\"}}\n</tool_call>"));
  EXPECT_FALSE(grammar_accepts(hermes, "{\"name\": \"add\", \"arguments\": {}}"));
  EXPECT_FALSE(grammar_accepts(hermes, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));

  const std::string two_hermes =
      "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
  EXPECT_FALSE(grammar_accepts(hermes, two_hermes));
  RequestedConstraint hermes_several;
  ASSERT_FALSE(forced_tool_call_constraint(ToolCallFormat::kHermesTags, kTools, "", /*several=*/true, &hermes_several));
  EXPECT_TRUE(grammar_accepts(hermes_several, two_hermes));
  EXPECT_TRUE(grammar_accepts(hermes_several, "<tool_call>\n{\"name\": \"add\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(grammar_accepts(hermes_several, ""));
  EXPECT_FALSE(grammar_accepts(hermes_several, two_hermes + "\n"));

  RequestedConstraint llama_several;
  ASSERT_FALSE(forced_tool_call_constraint(ToolCallFormat::kLlama3Json, kTools, "", /*several=*/true, &llama_several));
  EXPECT_TRUE(grammar_accepts(llama_several, "{\"name\": \"add\", \"parameters\": {\"a\": 3}}"));
  EXPECT_TRUE(grammar_accepts(llama_several, "{\"name\": \"add\", \"parameters\": {\"a\": 3}}; "
                                             "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}"));
  EXPECT_FALSE(grammar_accepts(llama_several, "{\"name\": \"add\", \"parameters\": {\"a\": \"x\"}}"));

  RequestedConstraint named;
  ASSERT_FALSE(forced_tool_call_constraint(ToolCallFormat::kLlama3Json, kTools, "add", /*several=*/false, &named));
  EXPECT_TRUE(grammar_accepts(named, "{\"name\": \"add\", \"parameters\": {\"a\": 3}}"));
  EXPECT_FALSE(grammar_accepts(named, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}"));
  EXPECT_FALSE(grammar_accepts(named, "{\"name\": \"add\", \"arguments\": {\"a\": 3}}"));
}

TEST(ToolCalls, RefusedParameterSchemaNamesTheTool) {
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "f", "strict": true,
    "parameters": {"type": "object", "properties": {"x": {"type": "string", "not": {}}}}}}])");
  RequestedConstraint c;
  std::optional<ApiError> e = forced_tool_call_constraint(ToolCallFormat::kHermesTags, tools, "", false, &c);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tools[0].function.parameters");
  EXPECT_NE(e->message.find("'not'"), std::string::npos) << e->message;
  ojson lax = tools;
  lax[0]["function"]["strict"] = false;  // unsupported keywords ignored
  EXPECT_FALSE(forced_tool_call_constraint(ToolCallFormat::kHermesTags, lax, "", false, &c));
}

std::string error_param(const std::string& body) {
  Parsed<ChatCompletionRequest> p = parse_chat_completion_request(body);
  return p.ok() ? "<ok>" : p.error.param;
}

TEST(ToolCalls, RequestFieldsAreChecked) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  EXPECT_EQ(error_param("{" + msgs + ", " + tools + "}"), "<ok>");
  EXPECT_EQ(error_param("{" + msgs + R"(, "tools": [{"type": "retrieval"}]})"), "tools[0].type");
  EXPECT_EQ(error_param("{" + msgs + R"(, "tools": [{"type": "function", "function": {"name": "a b"}}]})"),
            "tools[0].function.name");
  EXPECT_EQ(error_param("{" + msgs + R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]})"),
            "tools[0].function.parameters");
  EXPECT_EQ(error_param("{" + msgs + R"(, "tool_choice": "required"})"), "tool_choice");
  EXPECT_EQ(error_param("{" + msgs + ", " + tools + R"(, "tool_choice": "always"})"), "tool_choice");
  EXPECT_EQ(error_param("{" + msgs + ", " + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}}})"),
            "tool_choice");
  EXPECT_EQ(error_param("{" + msgs + ", " + tools +
                        R"(, "tool_choice": "required", "response_format": {"type": "json_object"}})"),
            "response_format");

  Parsed<ChatCompletionRequest> named = parse_chat_completion_request(
      "{" + msgs + ", " + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}}})");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named.value->tool_choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(named.value->tool_choice.name, "f");
  Parsed<ChatCompletionRequest> dflt = parse_chat_completion_request("{" + msgs + ", " + tools + "}");
  EXPECT_EQ(dflt.value->tool_choice.mode, ToolChoice::Mode::kAuto);
}

TEST(ToolCalls, AssistantToolCallArgumentsBecomeObjects) {
  Parsed<ChatCompletionRequest> p = parse_chat_completion_request(R"({"messages": [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "42"}]})");
  ASSERT_TRUE(p.ok()) << p.error.message;
  const ojson& m = p.value->messages;
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"], ojson::parse(R"({"x": 1})"));
  EXPECT_EQ(m[2]["tool_call_id"], "call_1");
  EXPECT_EQ(m[2]["role"], "tool");
}

TEST(ResponseConstraint, FieldsAndErrors) {
  auto param_of = [](const std::string& extra) {
    Parsed<CompletionRequest> p = parse_completion_request(R"({"prompt": "x", )" + extra + "}");
    return p.ok() ? std::string("<ok>") : p.error.param;
  };
  auto kind_of = [](const std::string& extra) {
    Parsed<CompletionRequest> p = parse_completion_request(R"({"prompt": "x", )" + extra + "}");
    EXPECT_TRUE(p.ok() && p.value->constraint) << extra;
    return p.ok() && p.value->constraint ? p.value->constraint->spec.kind : structured::ConstraintSpec::Kind::kGrammar;
  };
  using K = structured::ConstraintSpec::Kind;
  EXPECT_EQ(kind_of(R"("response_format": {"type": "json_object"})"), K::kJsonObject);
  EXPECT_EQ(kind_of(R"("response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer"}}})"),
            K::kJsonSchema);
  EXPECT_EQ(kind_of(R"("structured_outputs": {"choice": ["a", "b"]})"), K::kChoice);
  EXPECT_EQ(kind_of(R"("structured_outputs": {"regex": "a+"})"), K::kRegex);
  EXPECT_EQ(kind_of(R"("structured_outputs": {"grammar": "root ::= \"a\""})"), K::kGrammar);
  EXPECT_EQ(kind_of(R"("structured_outputs": {"json": "{\"type\": \"integer\"}"})"), K::kJsonSchema);
  EXPECT_EQ(kind_of(R"("guided_json": {"type": "integer"})"), K::kJsonSchema);
  EXPECT_EQ(kind_of(R"("guided_choice": ["a"])"), K::kChoice);
  EXPECT_EQ(kind_of(R"("response_format": {"type": "text"}, "guided_regex": "a")"), K::kRegex);
  Parsed<CompletionRequest> text = parse_completion_request(R"({"prompt": "x", "response_format": {"type": "text"}})");
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(text.value->constraint);

  EXPECT_EQ(param_of(R"("response_format": {"type": "xml"})"), "response_format");
  EXPECT_EQ(param_of(R"("response_format": "json")"), "response_format");
  EXPECT_EQ(param_of(R"("structured_outputs": {"choice": []})"), "structured_outputs.choice");
  EXPECT_EQ(param_of(R"("structured_outputs": {"json": "{nope"})"), "structured_outputs.json");
  EXPECT_EQ(param_of(R"("guided_regex": 5)"), "guided_regex");
  EXPECT_EQ(param_of(R"("guided_regex": "a", "guided_choice": ["b"])"), "guided_choice");
  EXPECT_EQ(param_of(R"("response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"})"),
            "structured_outputs.regex");
}

}  // namespace
}  // namespace loom::serve
