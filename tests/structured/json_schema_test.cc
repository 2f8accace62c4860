// JSON Schema → grammar: each keyword kind accepts instances and rejects
// non-instances; unsupported keywords are refused by name when strict; every schema
// of the corpus (tests/structured/schemas) compiles.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>

#include "loom/structured/json_schema_to_grammar.h"
#include "structured/structured_test_util.h"

namespace loom::structured {
namespace {

struct Case {
  const char* schema;
  std::vector<const char*> valid, invalid;
};

TEST(JsonSchema, KeywordsAcceptInstancesAndRejectOthers) {
  const std::vector<Case> cases = {
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"]})",
       {R"({"a":1})", R"({"a": -2, "b": "x"})", R"({ "a" : 0 , "b" : "" })"},
       {R"({})", R"({"b":"x"})", R"({"a":1.5})", R"({"b":"x","a":1})", R"({"a":1,"c":2})", R"({"a":01})"}},
      {R"({"type":"object","properties":{"x":{"type":"boolean"},"y":{"type":"null"}}})",
       {"{}", R"({"x":true})", R"({"y":null})", R"({"x":false,"y":null})"},
       {R"({"x":1})", R"({,"y":null})", R"({"x":true,})"}},
      {R"({"type":"object","properties":{"k":{"type":"integer"}},"additionalProperties":{"type":"string"}})",
       {R"({"k":1,"other":"v"})", R"({"other":"v"})", R"({"k2":"v"})", R"({"kk":"v", "q":"w"})"},
       {R"({"k":1,"other":2})", R"({"k":"x"})", R"({"k":1,"k":"dup"})"}},
      {R"({"enum":["red","green",3,null]})", {R"("red")", "3", "null"}, {R"("blue")", "4", R"(red)"}},
      {R"({"const":{"v":1}})", {R"({"v":1})"}, {R"({"v":2})"}},
      {R"({"type":"array","maxItems":2})", {"[]", "[1]", "[1, null]"}, {"[1,2,3]"}},
      {R"({"type":"array","items":{"type":"number"},"minItems":1,"maxItems":3})",
       {"[1]", "[1, 2.5, -3e2]"}, {"[]", "[1,2,3,4]", R"(["a"])"}},
      {R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
       {R"(["a", 1])", R"(["a"])", "[]"}, {R"(["a", 1, 2])", R"([1, "a"])"}},
      {R"({"anyOf":[{"type":"string"},{"type":"integer","minimum":10}]})", {R"("s")", "10", "99"}, {"9", "true"}},
      {R"({"oneOf":[{"type":"null"},{"$ref":"#/$defs/p"}],"$defs":{"p":{"type":"object","properties":{"n":{"$ref":"#/$defs/p"}}}}})",
       {"null", "{}", R"({"n":{"n":{}}})"}, {R"({"n":null})", R"({"n":1})"}},
      {R"({"type":["string","null"]})", {R"("x")", "null"}, {"1"}},
      {R"({"type":"string","format":"date"})", {R"("2024-02-28")"}, {R"("2024-13-01")", R"("24-01-01")"}},
      {R"({"type":"string","format":"date-time"})", {R"("2024-02-28T13:05:00Z")", R"("2024-02-28T13:05:00.25+02:00")"},
       {R"("2024-02-28 13:05:00Z")"}},
      {R"({"type":"string","format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"}, {R"("123e4567")"}},
      {R"({"type":"string","minLength":2,"maxLength":3})", {R"("ab")", R"("a\"c")", R"("\u00e9\u00e9")"}, {R"("a")", R"("abcd")"}},
      {R"({"type":"string","pattern":"^[A-Z]{2}\\d+$"})", {R"("AB12")"}, {R"("ab12")", R"("AB")"}},
      {R"({"type":"integer","minimum":-5,"maximum":123})", {"-5", "0", "7", "99", "100", "123"}, {"-6", "124", "1000", "-0"}},
      {R"({"type":"integer","exclusiveMinimum":0})", {"1", "12345"}, {"0", "-1"}},
      {R"({"type":"integer","maximum":-10})", {"-10", "-11", "-999"}, {"-9", "0", "10"}},
      {R"({"type":"number","minimum":0.5,"maximum":2.25})", {"0.5", "0.50", "1", "1.999", "2", "2.25", "2.2500"},
       {"0.49", "0.4999999", "2.26", "2.250001", "3", "-1", "0", "1e0"}},
      {R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})", {"0.1", "0.999", "0.0001"},
       {"0", "0.0", "1", "1.0", "-0.5", "-0"}},
      {R"({"type":"number","minimum":-1.5,"maximum":-0.25})", {"-1.5", "-1", "-0.25", "-0.3", "-1.49"},
       {"-1.51", "-0.2", "0", "-0", "-2"}},
      {R"({"type":"number","minimum":-2.5})", {"-2.5", "-2", "0", "12345.678", "-0.1"}, {"-2.6", "-3", "-0"}},
      {R"({"type":"number","exclusiveMaximum":10,"maximum":20})", {"9.999", "-100.5", "0"}, {"10", "10.0", "10.5", "11"}},
      {R"({"allOf":[{"type":"boolean"}]})", {"true"}, {"1"}},
      {"true", {"1", R"({"a":[null]})"}, {"{"}},
  };
  for (const Case& c : cases) {
    auto g = test::compile(json_schema_to_grammar(c.schema));
    ASSERT_TRUE(g) << c.schema;
    for (const char* v : c.valid) EXPECT_TRUE(grammar_matches(*g, v)) << c.schema << " should accept " << v;
    for (const char* v : c.invalid) EXPECT_FALSE(grammar_matches(*g, v)) << c.schema << " should reject " << v;
  }
}

TEST(JsonSchema, StrictRefusesUnsupportedKeywordsByName) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"type":"array","uniqueItems":true})", "'uniqueItems'"},
      {R"({"type":"object","properties":{"a":{"type":"string","format":"email"}}})", "'format'"},
      {R"({"type":"number","multipleOf":0.5})", "'multipleOf'"},
      {R"({"type":"number","minimum":1e16})", "'minimum'"},
      {R"({"type":"number","exclusiveMaximum":0.12345678901234567})", "'exclusiveMaximum'"},
      {R"({"not":{"type":"string"}})", "'not'"},
      {R"({"allOf":[{"type":"string"},{"maxLength":3}]})", "'allOf'"},
      {R"({"$ref":"https://example.com/s.json"})", "'$ref'"},
  };
  for (auto [schema, keyword] : cases) {
    auto g = json_schema_to_grammar(schema, true);
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_NE(g.status().message().find(keyword), std::string::npos) << g.status().message();
    EXPECT_TRUE(json_schema_to_grammar(schema, false).ok()) << schema << " should compile when not strict";
  }
  for (auto [schema, needle] : std::vector<std::pair<const char*, const char*>>{
           {"{", "not valid JSON"},
           {R"({"type":"strng"})", "unknown type 'strng'"},
           {R"({"$ref":"#/$defs/missing"})", "points at nothing"},
           {R"({"type":"integer","minimum":5,"maximum":1})", "empty"},
           {R"({"type":"string","pattern":"(a"})", "/pattern"}}) {
    auto g = json_schema_to_grammar(schema, false);
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_NE(g.status().message().find(needle), std::string::npos) << g.status().message();
  }
}

// Random bounds (up to 3 decimal places) against decimal strings near and between
// them: the grammar accepts exactly the strings whose value is in range, compared
// exactly in millionths.
TEST(JsonSchema, NumberRangesAcceptExactlyTheValuesInRange) {
  std::mt19937 rng(7);
  auto rand_int = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto bound_text = [&](int64_t millionths) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%lld.%06lld", millionths < 0 ? "-" : "", static_cast<long long>(std::llabs(millionths) / 1000000),
                  static_cast<long long>(std::llabs(millionths) % 1000000));
    return std::string(buf);
  };
  int checked = 0;
  for (int trial = 0; trial < 150; ++trial) {
    std::optional<int64_t> lo, hi;
    if (rand_int(0, 3)) lo = int64_t{rand_int(-30000, 30000)} * 1000;  // 3 decimal places
    if (rand_int(0, 3)) hi = int64_t{rand_int(-30000, 30000)} * 1000;
    if (lo && hi && *lo > *hi) std::swap(*lo, *hi);
    const bool lo_ex = rand_int(0, 1), hi_ex = rand_int(0, 1);
    if (lo && hi && *lo == *hi && (lo_ex || hi_ex)) continue;
    std::string schema = R"({"type":"number")";
    if (lo) schema += std::string(",\"") + (lo_ex ? "exclusiveMinimum" : "minimum") + "\":" + bound_text(*lo);
    if (hi) schema += std::string(",\"") + (hi_ex ? "exclusiveMaximum" : "maximum") + "\":" + bound_text(*hi);
    schema += "}";
    auto g = test::compile(json_schema_to_grammar(schema));
    ASSERT_TRUE(g) << schema;
    std::vector<int64_t> values;
    for (std::optional<int64_t> b : {lo, hi})
      if (b)
        for (int64_t d : {0, 1, -1, 10, -10, 1000, -1000, 999000, -1001000}) values.push_back(*b + d);
    for (int i = 0; i < 12; ++i) values.push_back(int64_t{rand_int(-40000, 40000)} * rand_int(1, 1000));
    for (int64_t v : values) {
      // v in millionths, written with 0 to 6 decimal places (trailing zeros kept when they fit)
      const int64_t whole = std::llabs(v) / 1000000, frac = std::llabs(v) % 1000000;
      int places = rand_int(0, 6);
      int64_t unit = 1;
      for (int k = 0; k < 6 - places; ++k) unit *= 10;
      if (frac % unit != 0) places = 6, unit = 1;
      std::string text = (v < 0 ? "-" : "") + std::to_string(whole);
      if (places > 0) {
        std::string f = std::to_string(frac / unit);
        text += "." + std::string(static_cast<size_t>(places) - f.size(), '0') + f;
      }
      const bool in_range = (!lo || (lo_ex ? v > *lo : v >= *lo)) && (!hi || (hi_ex ? v < *hi : v <= *hi));
      EXPECT_EQ(grammar_matches(*g, text), in_range) << schema << " on " << text;
      ++checked;
    }
  }
  EXPECT_GT(checked, 2000);
}

TEST(JsonSchema, CorpusCompiles) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(test::source_path("tests/structured/schemas"))) {
    if (e.path().extension() != ".json") continue;
    auto g = json_schema_to_grammar(test::read_text(e.path().string()), true);
    EXPECT_TRUE(g.ok()) << e.path() << ": " << g.status().to_string();
    ++n;
  }
  EXPECT_GE(n, 50u);
}

}  // namespace
}  // namespace loom::structured

namespace loom::structured {
namespace {

TEST(JsonSchema, DeepNestingIsRefused) {
  std::string s;
  for (int i = 0; i < 5000; ++i) s += R"({"type":"array","items":)";
  s += "true";
  for (int i = 0; i < 5000; ++i) s += "}";
  auto g = json_schema_to_grammar(s);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("nest deeper"), std::string::npos) << g.status().message();
}

}  // namespace
}  // namespace loom::structured
