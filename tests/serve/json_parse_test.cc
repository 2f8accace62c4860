// The request JSON parser: the same value as nlohmann::ordered_json::parse (key
// order, a repeated key's last value in its first place, every scalar type,
// the same inputs refused), without its quadratic object building.
#include "serve/json_parse.h"

#include <gtest/gtest.h>

#include <string>

namespace loom::serve {
namespace {

using ojson = nlohmann::ordered_json;

void expect_same_as_nlohmann(const std::string& text) {
  const ojson reference = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::optional<ojson> ours = parse_json(text);
  if (reference.is_discarded()) {
    EXPECT_FALSE(ours.has_value()) << text;
    return;
  }
  ASSERT_TRUE(ours.has_value()) << text;
  EXPECT_EQ(ours->dump(), reference.dump()) << text;  // dump shows key order too
}

TEST(JsonParse, SameValueAsNlohmann) {
  for (const char* text : {
           R"({"b": 1, "a": [true, false, null], "c": {"z": 1.5, "y": -3, "x": 18446744073709551615}})",
           R"({"k": 1, "j": 2, "k": 3})",                       // repeated key: last value, first place
           R"({"o": {"a": 1}, "o": {"b": [1, {"c": 2}]}, "p": 0})",  // repeated key with a container value
           R"([1, "two", [3, [4, [5]]], {"six": 6}, -0.0, 1e308])",
           R"("just a string with \u00e9 and \ud83d\ude00")", R"(42)", R"(null)", R"({})", R"([])",
           R"({"a": 1,})", R"({"a" 1})", R"([1, 2)", "{\"a\": \"\xff\"}", "", "  ", R"({"a": 1} x)", R"(nul)",
       })
    expect_same_as_nlohmann(text);
}

// An object of many keys (the issue's case: 200,000 keys in one field) builds
// with every key in order; nlohmann's ordered_json compares each new key with
// every earlier one.
TEST(JsonParse, ManyKeysKeepTheirOrder) {
  const int n = 200000;
  std::string text = "{\"logit_bias\": {";
  for (int i = 0; i < n; ++i) text += (i ? ",\"" : "\"") + std::to_string(n - i) + "\": " + std::to_string(i % 7);
  text += ", \"17\": 99}}";
  const std::optional<ojson> j = parse_json(text);
  ASSERT_TRUE(j.has_value());
  const auto& bias = (*j)["logit_bias"].get_ref<const ojson::object_t&>();  // the keys, in order
  ASSERT_EQ(bias.size(), static_cast<size_t>(n));
  EXPECT_EQ(bias.front().first, std::to_string(n));
  EXPECT_EQ(bias.begin()[n - 17].first, "17");
  EXPECT_EQ(bias.begin()[n - 17].second, 99);  // the repeated key's last value, in its first place
  EXPECT_EQ(bias.back().first, "1");
}

}  // namespace
}  // namespace loom::serve
