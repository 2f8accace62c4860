// GBNF: llama.cpp-style example grammars parse and accept/reject sample strings; the
// parser's errors name what is wrong and where.
#include <gtest/gtest.h>

#include "structured/structured_test_util.h"

namespace loom::structured {
namespace {

using test::compile;

std::shared_ptr<CompiledGrammar> example(const std::string& name) {
  return compile(parse_gbnf(test::read_text(test::source_path("tests/structured/grammars/" + name))));
}

TEST(Gbnf, JsonExampleAcceptsJsonAndRejectsTheRest) {
  auto g = example("json.gbnf");
  ASSERT_TRUE(g);
  for (const char* ok : {"{}", "{\"a\": 1}", "{\"a\": [1, 2.5, -3e+2, \"x\", true, null], \"b\": {\"c\": \"\\u00e9\\n\"}}",
                         "{ \"k\" : \"caf\xC3\xA9\" }\n"}) {
    EXPECT_TRUE(grammar_matches(*g, ok)) << ok;
  }
  for (const char* bad : {"", "[]", "{", "{\"a\" 1}", "{\"a\": 01}", "{\"a\": tru}", "{\"a\": \"\x01\"}", "{'a': 1}",
                          "{\"a\": 1,}"}) {
    EXPECT_FALSE(grammar_matches(*g, bad)) << bad;
  }
}

TEST(Gbnf, ArithmeticExample) {
  auto g = example("arithmetic.gbnf");
  ASSERT_TRUE(g);
  EXPECT_TRUE(grammar_matches(*g, "1+2=3\n"));
  EXPECT_TRUE(grammar_matches(*g, "(x_1 *4) /y= z\nab=7\n"));
  EXPECT_FALSE(grammar_matches(*g, "1+=3\n"));
  EXPECT_FALSE(grammar_matches(*g, "1+2=3"));  // the newline is required
  EXPECT_FALSE(grammar_matches(*g, "(1+2=3\n"));
}

TEST(Gbnf, ListExampleWithUnicodeNegatedClass) {
  auto g = example("list.gbnf");
  ASSERT_TRUE(g);
  EXPECT_TRUE(grammar_matches(*g, "- eggs\n- caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD\n"));
  EXPECT_FALSE(grammar_matches(*g, "- \n"));
  EXPECT_FALSE(grammar_matches(*g, "- a\xE2\x80\xA8" "b\n"));  // U+2028 is excluded
  EXPECT_FALSE(grammar_matches(*g, "* a\n"));
  // Invalid UTF-8 never matches a class of characters.
  EXPECT_FALSE(grammar_matches(*g, "- \xC3\n"));
  EXPECT_FALSE(grammar_matches(*g, "- \xED\xA0\x80\n"));  // a surrogate
}

TEST(Gbnf, ChessExample) {
  auto g = example("chess.gbnf");
  ASSERT_TRUE(g);
  EXPECT_TRUE(grammar_matches(*g, "1. e4 e5\n2. Nf3 Nc6\n3. O-O exd4\n"));
  EXPECT_FALSE(grammar_matches(*g, "1. e9 e5\n2. Nf3 Nc6\n"));
}

TEST(Gbnf, Repetitions) {
  auto g = compile(parse_gbnf("root ::= \"a\"{2,4} \"b\"{3} [xy]{1,} \"z\"?"));
  ASSERT_TRUE(g);
  EXPECT_TRUE(grammar_matches(*g, "aabbbx"));
  EXPECT_TRUE(grammar_matches(*g, "aaaabbbxyxyz"));
  EXPECT_FALSE(grammar_matches(*g, "abbbx"));
  EXPECT_FALSE(grammar_matches(*g, "aaaaabbbx"));
  EXPECT_FALSE(grammar_matches(*g, "aabbx"));
  EXPECT_FALSE(grammar_matches(*g, "aabbb"));
  auto star = compile(parse_gbnf("root ::= (\"ab\" | \"c\")* \"!\""));
  EXPECT_TRUE(grammar_matches(*star, "!"));
  EXPECT_TRUE(grammar_matches(*star, "abcab!"));
  EXPECT_FALSE(grammar_matches(*star, "aab!"));
}

TEST(Gbnf, EscapesAndDotAndComments) {
  auto g = compile(parse_gbnf("# comment\nroot ::= \"\\x41\\u00e9\\t\" . [\\]\\-] # trailing\n"));
  ASSERT_TRUE(g);
  EXPECT_TRUE(grammar_matches(*g, "A\xC3\xA9\t\xE2\x82\xAC]"));
  EXPECT_TRUE(grammar_matches(*g, "A\xC3\xA9\tz-"));
  EXPECT_FALSE(grammar_matches(*g, "A\xC3\xA9\tzz"));
}

TEST(Gbnf, MatcherRollsBackAndReportsAcceptance) {
  auto g = compile(parse_gbnf("root ::= \"ab\" | \"abcd\""));
  GrammarMatcher m(g);
  EXPECT_FALSE(m.accepting());
  EXPECT_TRUE(m.accept("ab"));
  EXPECT_TRUE(m.accepting());
  EXPECT_TRUE(m.can_continue());
  GrammarMatcher copy = m;
  EXPECT_FALSE(m.accept("cx"));  // all or nothing
  EXPECT_EQ(m.history_size(), 2u);
  EXPECT_TRUE(m.accept("cd"));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.can_continue());
  m.rollback(2);
  EXPECT_EQ(m.state(), copy.state());
  EXPECT_TRUE(copy.accept("c"));
  EXPECT_FALSE(copy.accepting());
}

void expect_error(const char* text, const std::string& needle) {
  auto g = parse_gbnf(text);
  ASSERT_FALSE(g.ok()) << text;
  EXPECT_NE(g.status().message().find(needle), std::string::npos) << g.status().message();
}

TEST(Gbnf, ErrorsNameTheProblem) {
  expect_error("root ::= foo", "'foo' is used but never defined");
  expect_error("start ::= \"a\"", "no 'root' rule");
  expect_error("root ::= \"a", "unterminated string literal");
  expect_error("root ::= [a-", "unterminated character class");
  expect_error("root ::= (\"a\"", "unclosed '('");
  expect_error("root ::= root \"a\" | \"b\"", "left-recursive");
  expect_error("root ::= x\nx ::= \"\"? root", "left-recursive");
  expect_error("root ::= \"a\"{3,2}", "n < m");
  expect_error("root ::= \"\\q\"", "unknown escape");
  expect_error("root ::= [z-a]", "reversed");
  expect_error("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
  expect_error("root ::= \"a\"\n  \"b\" ::= x", "line 2 column 7");
  expect_error("root ::= <[1234]>", "token references");
}

}  // namespace
}  // namespace loom::structured

namespace loom::structured {
namespace {

// Inputs that would overflow a recursive parser or explode the automaton get errors.
TEST(Gbnf, PathologicalInputsAreRefusedNotFatal) {
  std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  auto g = parse_gbnf(deep);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("nest deeper"), std::string::npos) << g.status().message();
  // Nested nullable repetitions: expansion chains far deeper than a call stack would allow.
  auto explode = test::compile(parse_gbnf("root ::= ((\"a\"?){10000}){10000} \"b\""));
  ASSERT_TRUE(explode);
  GrammarMatcher m(explode);
  EXPECT_TRUE(explode->too_complex());
}

}  // namespace
}  // namespace loom::structured
