// Malformed or unsupported tokenizer.json files name the component and field; invalid
// UTF-8 input and out-of-range ids are errors, not crashes.
#include <gtest/gtest.h>

#include "loom/tokenizer/incremental_detokenizer.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom {
namespace {

// A tiny valid tokenizer to mutate.
nlohmann::json tiny() {
  return nlohmann::json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 5, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}]},
    "post_processor": null,
    "decoder": null,
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "c": 3, "<unk>": 4, "<s>": 5},
              "merges": ["a b"], "unk_token": "<unk>"}
  })");
}

std::string load_error(const nlohmann::json& j) {
  auto t = Tokenizer::from_json_string(j.dump(), "tok.json");
  EXPECT_FALSE(t.ok()) << "expected an error for " << j.dump();
  return t.ok() ? std::string() : t.status().message();
}

TEST(TokenizerErrors, TinyTokenizerWorks) {
  auto t = Tokenizer::from_json_string(tiny().dump());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto e = (*t)->encode("ab c <s>abd", true);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->ids, (std::vector<int32_t>{2, 3, 5, 2, 4}));
  EXPECT_EQ(e->tokens, (std::vector<std::string>{"ab", "c", "<s>", "ab", "<unk>"}));
  EXPECT_EQ(e->byte_offsets[4], (std::pair<size_t, size_t>{10, 11}));
}

TEST(TokenizerErrors, UnknownComponentTypeNamesThePath) {
  auto j = tiny();
  j["pre_tokenizer"]["pretokenizers"].push_back({{"type", "Foo"}});
  std::string m = load_error(j);
  EXPECT_NE(m.find("tok.json: pre_tokenizer.pretokenizers[1]: unknown type \"Foo\""), std::string::npos) << m;

  j = tiny();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Bar"}}}}};
  m = load_error(j);
  EXPECT_NE(m.find("normalizer.normalizers[1]: unknown type \"Bar\""), std::string::npos) << m;

  j = tiny();
  j["decoder"] = {{"type", "Nope"}};
  m = load_error(j);
  EXPECT_NE(m.find("decoder: unknown type \"Nope\""), std::string::npos) << m;

  j = tiny();
  j["model"]["type"] = "Bigram";
  m = load_error(j);
  EXPECT_NE(m.find("model: unknown type \"Bigram\""), std::string::npos) << m;
}

// model.vocab and model.merges are read straight from the text, not through a DOM
// (json_util.h's ModelTables): written out by hand here, with what a DOM would make
// of them (the last of duplicate keys, merges after the vocab, either merge form) and
// bad entries of every shape named by their field.
TEST(TokenizerErrors, StreamedVocabAndMergesMeanWhatTheDomMeant) {
  const std::string head = R"({"pre_tokenizer": {"type": "WhitespaceSplit"}, "normalizer": {"type": "Sequence", "normalizers": [],
                              "vocab": {"ignored": "not the model's"}},
                              "model": {"type": "BPE", "unk_token": "<unk>", )";
  auto with = [&](const std::string& model_fields) { return head + model_fields + "}}"; };
  // Merges before the vocab; "b" twice (the later id counts); a pair and a string merge.
  auto t = Tokenizer::from_json_string(with(R"("merges": [["a", "b"], "ab c"],
      "vocab": {"a": 0, "b": 9, "ab": 2, "c": 3, "abc": 4, "<unk>": 5, "b": 1})"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->encode("abc ab b", false)->ids, (std::vector<int32_t>{4, 2, 1}));
  EXPECT_EQ((*t)->token_to_id("b"), 1);

  const std::string vocab = R"("vocab": {"a": 0, "b": 1, "ab": 2, "<unk>": 3})";
  const std::pair<std::string, std::string> bad[] = {
      {R"("vocab": {"a": 0, "b": {"id": 1}})", "model.vocab[\"b\"]: expected a non-negative id"},
      {R"("vocab": {"a": [0], "b": 1})", "model.vocab[\"a\"]: expected a non-negative id"},
      {R"("vocab": {"a": -1})", "model.vocab[\"a\"]: expected a non-negative id"},
      {R"("vocab": {"a": 4294967296})", "model.vocab[\"a\"]: expected a non-negative id"},
      {R"("vocab": {"a": 0.5})", "model.vocab[\"a\"]: expected a non-negative id"},
      {vocab + R"(, "merges": ["a b", ["a", 1]])", "model.merges[1]: expected \"left right\" or [left, right]"},
      {vocab + R"(, "merges": [["a", "b", "c"]])", "model.merges[0]: expected \"left right\" or [left, right]"},
      {vocab + R"(, "merges": ["a b", {"a": "b"}])", "model.merges[1]: expected \"left right\" or [left, right]"},
      {vocab + R"(, "merges": ["a b", [["a"], "b"], "a b"])", "model.merges[1]: expected \"left right\" or [left, right]"},
      {vocab + R"(, "merges": [null])", "model.merges[0]: expected \"left right\" or [left, right]"},
      {vocab + R"(, "merges": ["a  b"])", "model.merges[0]: expected \"left right\", got \"a  b\""},
      {vocab + R"(, "merges": [["a", "zz"]])", "model.merges[0]: token \"zz\" is not in the vocabulary"},
      {vocab + R"(, "merges": {"a": "b"})", "model.merges: expected an array"},
      {R"("vocab": ["a", "b"])", "model.vocab: expected an object of token: id"},
  };
  for (const auto& [fields, want] : bad) {
    auto r = Tokenizer::from_json_string(with(fields), "tok.json");
    ASSERT_FALSE(r.ok()) << fields;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << fields << "\n" << r.status().message();
  }
}

TEST(TokenizerErrors, BadFieldsNameTheField) {
  auto j = tiny();
  j["normalizer"] = {{"type", "BertNormalizer"}, {"lowercase", "yes"}};
  EXPECT_NE(load_error(j).find("field 'normalizer.lowercase' must be true or false, got \"yes\""), std::string::npos);

  j = tiny();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_NE(load_error(j).find("pre_tokenizer.pattern.Regex: invalid regex"), std::string::npos);

  j = tiny();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
  EXPECT_NE(load_error(j).find("pre_tokenizer.behavior: unknown behavior \"Sideways\""), std::string::npos);

  j = tiny();
  j["model"]["merges"] = {"a zz"};
  EXPECT_NE(load_error(j).find("model.merges[0]: token \"zz\" is not in the vocabulary"), std::string::npos);

  j = tiny();
  j["model"]["merges"] = {"abc"};
  EXPECT_NE(load_error(j).find("model.merges[0]: expected \"left right\""), std::string::npos);

  j = tiny();
  j["model"]["vocab"]["a"] = "zero";
  EXPECT_NE(load_error(j).find("model.vocab[\"a\"]: expected a non-negative id"), std::string::npos);

  j = tiny();
  j.erase("model");
  EXPECT_NE(load_error(j).find("tok.json: model: missing"), std::string::npos);

  j = tiny();
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<x>"}, {"type_id", 0}}}}}},
                         {"special_tokens", nlohmann::json::object()}};
  EXPECT_NE(load_error(j).find("post_processor.single[0]: special token \"<x>\" is not in special_tokens"),
            std::string::npos);

  j = tiny();
  j["added_tokens"][0]["content"] = 7;
  EXPECT_NE(load_error(j).find("field 'added_tokens[0].content' must be a string, got 7"), std::string::npos);

  auto bad = Tokenizer::from_json_string("{\"model\": ", "broken.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("broken.json: invalid JSON"), std::string::npos);

  auto missing = Tokenizer::from_file("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
}

TEST(TokenizerErrors, InvalidUtf8IsAnError) {
  auto t = Tokenizer::from_json_string(tiny().dump());
  ASSERT_TRUE(t.ok());
  for (std::string bad : {std::string("ab\xff"), std::string("a\xc3"), std::string("\xed\xa0\x80"),
                          std::string("\xc0\xaf"), std::string("ab \xf4\x90\x80\x80")}) {
    auto e = (*t)->encode(bad);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("not valid UTF-8"), std::string::npos);
  }
  auto batch = (*t)->encode_batch({"ab", "\xff"}, true);
  ASSERT_FALSE(batch.ok());
  EXPECT_NE(batch.status().message().find("encode_batch[1]"), std::string::npos);
}

TEST(TokenizerErrors, OutOfRangeIdsAreErrors) {
  auto t = Tokenizer::from_json_string(tiny().dump());
  ASSERT_TRUE(t.ok());
  for (int32_t bad : {6, -1, 1 << 30}) {
    auto d = (*t)->decode({0, bad}, false);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), ErrorCode::kOutOfRange);
    EXPECT_NE(d.status().message().find("id " + std::to_string(bad)), std::string::npos);
  }
  IncrementalDetokenizer stream(*t);
  EXPECT_EQ(stream.push(2), "ab");
  EXPECT_THROW(stream.push(99), Error);
  EXPECT_EQ(stream.push(3), " c");  // the bad id left no trace
  EXPECT_FALSE((*t)->id_to_token(6).has_value());
  EXPECT_EQ((*t)->id_to_token(5).value(), "<s>");
  EXPECT_EQ((*t)->token_to_id("ab").value(), 2);
}

}  // namespace
}  // namespace loom
