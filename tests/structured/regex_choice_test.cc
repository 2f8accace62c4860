// Regular expressions and choice lists compile to grammars that match what std::regex
// (ECMAScript, full match) matches, on a set of strings per pattern.
#include <gtest/gtest.h>

#include <regex>

#include "loom/structured/regex_to_grammar.h"
#include "structured/structured_test_util.h"

namespace loom::structured {
namespace {

using test::compile;

struct RegexCase {
  const char* pattern;
  std::vector<const char*> samples;
};

TEST(Regex, AgreesWithStdRegexOnSamples) {
  const std::vector<RegexCase> cases = {
      {"\\d{3}-\\d{4}", {"555-1234", "55-1234", "5555-1234", "abc-defg", "555-12345"}},
      {"[A-Z][a-z]+( [A-Z][a-z]+)*", {"John", "John Smith", "john", "John smith", "J", "Ab Cd Ef"}},
      {"(cat|dog)s?", {"cat", "dogs", "cats", "bird", "", "catdog"}},
      {"^[^@\\s]+@[\\w-]+\\.(com|org)$", {"a@b.com", "a.b@c-d.org", "a@b.net", "a b@c.com", "@b.com"}},
      {"a.c", {"abc", "a\nc", "ac", "a-c"}},
      {"x{2,}y{0,2}", {"xx", "xxxxyy", "x", "xxyyy"}},
      {"(?:ab)+c*?", {"ab", "ababccc", "abc", "a", ""}},
      {"[\\d.]+|none", {"3.14", "...", "none", "nan", "12a"}},
      {"\\w+\\s\\W", {"ab !", "ab  !", "a\tb"}},
      {"(true|false)", {"true", "false", "True"}},
  };
  for (const RegexCase& c : cases) {
    auto g = compile(regex_to_grammar(c.pattern));
    ASSERT_TRUE(g) << c.pattern;
    std::regex re(c.pattern, std::regex::ECMAScript);
    for (const char* s : c.samples) {
      EXPECT_EQ(grammar_matches(*g, s), std::regex_match(s, re)) << "/" << c.pattern << "/ on '" << s << "'";
    }
  }
}

TEST(Regex, RefusesWhatItCannotDo) {
  for (const char* p : {"a\\b", "(a)\\1", "(?=a)", "a**", "*a", "[a", "(a", "a)", "a{,3}", "a^b"}) {
    auto g = regex_to_grammar(p);
    EXPECT_FALSE(g.ok()) << p;
    if (!g.ok()) EXPECT_NE(g.status().message().find("regex position"), std::string::npos) << g.status().message();
  }
}

TEST(Choice, ExactlyOneOfTheList) {
  auto g = compile(choices_to_grammar({"yes", "no", "maybe \"so\"", "caf\xC3\xA9"}));
  ASSERT_TRUE(g);
  for (const char* s : {"yes", "no", "maybe \"so\"", "caf\xC3\xA9"}) EXPECT_TRUE(grammar_matches(*g, s)) << s;
  for (const char* s : {"", "ye", "yesno", "maybe", "Yes"}) EXPECT_FALSE(grammar_matches(*g, s)) << s;
  EXPECT_FALSE(choices_to_grammar({}).ok());
  EXPECT_FALSE(choices_to_grammar({"a", ""}).ok());
}

}  // namespace
}  // namespace loom::structured

namespace loom::structured {
namespace {

TEST(Regex, DeepNestingIsRefused) {
  auto g = regex_to_grammar(std::string(50000, '(') + "a" + std::string(50000, ')'));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("nest deeper"), std::string::npos) << g.status().message();
}

}  // namespace
}  // namespace loom::structured
