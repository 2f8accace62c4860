// Request fields → ConstraintSpec: OpenAI's response_format and vLLM's extras, one at
// a time, every error naming its field.
#include <gtest/gtest.h>

#include "loom/structured/request_constraint.h"

namespace loom::structured {
namespace {

using nlohmann::json;

TEST(RequestConstraint, ReadsEachKind) {
  auto none = constraint_spec_from_request(json{{"prompt", "x"}}, "line 1: ");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto text = constraint_spec_from_request(json::parse(R"({"response_format":{"type":"text"}})"), "");
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(text->has_value());
  auto obj = constraint_spec_from_request(json::parse(R"({"response_format":{"type":"json_object"}})"), "");
  ASSERT_TRUE(obj.ok() && obj->has_value());
  EXPECT_EQ((*obj)->kind, ConstraintSpec::Kind::kJsonObject);
  auto schema = constraint_spec_from_request(
      json::parse(R"({"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"integer"},"strict":false}}})"), "");
  ASSERT_TRUE(schema.ok() && schema->has_value());
  EXPECT_EQ((*schema)->kind, ConstraintSpec::Kind::kJsonSchema);
  EXPECT_FALSE((*schema)->strict);
  EXPECT_EQ(json::parse((*schema)->text), json::parse(R"({"type":"integer"})"));
  auto choice = constraint_spec_from_request(json::parse(R"({"choice":["a","b"]})"), "");
  ASSERT_TRUE(choice.ok() && choice->has_value());
  EXPECT_EQ((*choice)->choices, (std::vector<std::string>{"a", "b"}));
  auto regex = constraint_spec_from_request(json::parse(R"({"regex":"a+"})"), "");
  ASSERT_TRUE(regex.ok() && regex->has_value());
  EXPECT_EQ((*regex)->kind, ConstraintSpec::Kind::kRegex);
  auto grammar = constraint_spec_from_request(json::parse(R"({"grammar":"root ::= \"x\""})"), "");
  ASSERT_TRUE(grammar.ok() && grammar->has_value());
  EXPECT_EQ((*grammar)->kind, ConstraintSpec::Kind::kGrammar);
}

TEST(RequestConstraint, ErrorsNameTheField) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"response_format":"json"})", "'response_format'"},
      {R"({"response_format":{"type":"yaml"}})", "'response_format.type'"},
      {R"({"response_format":{"type":"json_schema"}})", "'response_format.json_schema'"},
      {R"({"response_format":{"type":"json_schema","json_schema":{"name":"x"}}})", "'response_format.json_schema.schema'"},
      {R"({"response_format":{"type":"json_schema","json_schema":{"schema":{},"strict":"yes"}}})", "strict"},
      {R"({"regex":""})", "'regex'"},
      {R"({"grammar":3})", "'grammar'"},
      {R"({"choice":[]})", "'choice'"},
      {R"({"choice":["a",1]})", "'choice'"},
      {R"({"regex":"a","choice":["a"]})", "'regex' and 'choice'"},
      {R"({"response_format":{"type":"json_object"},"grammar":"root ::= \"x\""})", "'response_format' and 'grammar'"},
  };
  for (auto [body, needle] : cases) {
    auto r = constraint_spec_from_request(json::parse(body), "input line 4: ");
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().rfind("input line 4: ", 0), 0u) << r.status().message();
  }
}

}  // namespace
}  // namespace loom::structured
