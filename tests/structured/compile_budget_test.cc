// What compiling a constraint may spend (compile_budget.h) and what the registry keeps:
// a deadline that has passed, a requester that left and a grammar over its element
// budget each stop the compilation with their own error; schemas with thousands of
// properties compile (they took minutes when rule naming was quadratic); the registry
// stays within its byte budget, least recently used out first.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "loom/structured/compile_budget.h"
#include "loom/structured/constraint.h"
#include "loom/structured/json_schema_to_grammar.h"
#include "loom/structured/regex_to_grammar.h"
#include "loom/tokenizer/tokenizer.h"
#include "structured/structured_test_util.h"

namespace loom::structured {
namespace {

std::shared_ptr<const TokenVocabulary> bundled_vocab() {
  static std::shared_ptr<const TokenVocabulary> v = [] {
    auto tok = Tokenizer::from_file(test::source_path("models/loom-kjv-tiny/tokenizer.json"));
    EXPECT_TRUE(tok.ok());
    return TokenVocabulary::from_tokenizer(**tok);
  }();
  return v;
}

ConstraintSpec regex_spec(const std::string& re) {
  ConstraintSpec s;
  s.kind = ConstraintSpec::Kind::kRegex;
  s.text = re;
  return s;
}

std::string many_properties_schema(int n, bool every_other_required) {
  std::string props, required;
  for (int i = 0; i < n; ++i) {
    props += (i ? ",\"p" : "\"p") + std::to_string(i) + "\":{\"type\":\"integer\"}";
    if (every_other_required && i % 2 == 0) required += (required.empty() ? "\"p" : ",\"p") + std::to_string(i) + "\"";
  }
  return "{\"type\":\"object\",\"properties\":{" + props + "},\"required\":[" + required + "]}";
}

TEST(CompileBudget, NoBudgetNoLimit) { EXPECT_TRUE(check_compile_budget().ok()); }

TEST(CompileBudget, PassedDeadlineIsATimeoutNamingTheBudget) {
  CompileBudget b;
  b.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  b.seconds = 0.25;
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kJsonSchema;
  spec.text = many_properties_schema(2000, true);
  ConstraintRegistry registry(bundled_vocab());
  auto c = registry.get(spec, &b);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kTimeout) << c.status().to_string();
  EXPECT_NE(c.status().message().find("budget of 0.25 s"), std::string::npos) << c.status().message();
  EXPECT_EQ(registry.stats().entries, 0u);  // nothing half-compiled is kept
  // Without the budget the same spec compiles.
  EXPECT_TRUE(registry.get(spec).ok());
}

TEST(CompileBudget, CancelledRequesterStopsTheCompilation) {
  std::atomic<bool> cancelled{true};
  CompileBudget b;
  b.cancelled = &cancelled;
  ConstraintRegistry registry(bundled_vocab());
  auto c = registry.get(regex_spec("(ab|cd)+x"), &b);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kCancelled);
}

TEST(CompileBudget, ElementBudgetCountsRepetitions) {
  CompileBudget b;
  b.max_elements = 50000;
  ConstraintRegistry registry(bundled_vocab());
  // 10 × 10,000 copies: over 50,000 elements, from 90 bytes of pattern.
  auto c = registry.get(regex_spec("(a{10000}b{10000}c{10000}d{10000}e{10000}f{10000}g{10000}h{10000}i{10000}j{10000})"), &b);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("50000 elements"), std::string::npos) << c.status().message();
  b.max_elements = 200000;
  EXPECT_TRUE(registry.get(regex_spec("(a{10000}b{10000}c{10000})"), &b).ok());
}

// 20,000 properties, half of them optional: the optional ones chain "-first"/"-rest"
// rules whose names were probed from 2 upwards each time (quadratic: minutes).
TEST(CompileBudget, TwentyThousandPropertiesCompile) {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kJsonSchema;
  spec.text = many_properties_schema(20000, true);
  auto g = json_schema_to_grammar(spec.text, true);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  CompiledGrammar compiled(std::move(*g));
  EXPECT_TRUE(grammar_matches(compiled, "{\"p0\":1,\"p2\":2,\"p3\":3,\"p4\":4" + [] {
    std::string rest;
    for (int i = 6; i < 20000; i += 2) rest += ",\"p" + std::to_string(i) + "\":0";
    return rest;
  }() + "}"));
  EXPECT_FALSE(grammar_matches(compiled, "{\"p1\":1}"));  // p0 is required
}

TEST(ConstraintRegistry, StaysWithinItsByteBudgetLeastRecentlyUsedOut) {
  const size_t budget = 2u << 20;
  ConstraintRegistry registry(bundled_vocab(), budget);
  auto first = registry.get(regex_spec("first[0-9]+"));
  ASSERT_TRUE(first.ok());
  const size_t one = (*first)->memory_bytes();
  ASSERT_GT(one, 0u);
  const int n = static_cast<int>(3 * budget / one) + 3;  // three budgets' worth
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(registry.get(regex_spec("r" + std::to_string(i) + "[a-z]{1,4}")).ok());
    // The first one, kept in use, stays the most recent but one.
    if (i % 4 == 0) ASSERT_TRUE(registry.get(regex_spec("first[0-9]+")).ok());
  }
  const ConstraintRegistry::Stats s = registry.stats();
  EXPECT_LE(s.bytes, budget);
  EXPECT_GT(s.evicted, 0u);
  EXPECT_LT(s.entries, static_cast<size_t>(n));
  EXPECT_EQ(s.compiled, static_cast<uint64_t>(n) + 1);
  EXPECT_NE(registry.find(regex_spec("first[0-9]+")), nullptr);  // recently used: kept
  EXPECT_EQ(registry.find(regex_spec("r0[a-z]{1,4}")), nullptr);  // the oldest: gone
  // An evicted spec compiles again on its next request.
  ASSERT_TRUE(registry.get(regex_spec("r0[a-z]{1,4}")).ok());
  EXPECT_EQ(registry.stats().compiled, static_cast<uint64_t>(n) + 2);
}

}  // namespace
}  // namespace loom::structured
