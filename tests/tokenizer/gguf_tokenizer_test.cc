// Tokenizers through GGUF metadata: each real tokenizer (and the bundled model's)
// written as tokenizer.ggml.* and read back encodes the oracle corpus to the ids the
// Hugging Face library gives for its tokenizer.json, and to what loom's own folder
// load gives with special tokens; decoding agrees too. Broken metadata fails by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "loom/io/gguf.h"
#include "loom/io/gguf_writer.h"
#include "loom/tokenizer/gguf_tokenizer.h"
#include "loom/tokenizer/tokenizer.h"
#include "tokenizer/oracle_data.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

fs::path temp_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("loom_gguf_tokenizer_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / (name + ".gguf");
}

// Writes `dir`'s tokenizer as a GGUF file holding nothing else. scores_only: a
// SentencePiece file without tokenizer.ggml.merges, as llama.cpp writes them.
std::string write_tokenizer_gguf(const std::string& dir, const std::string& name, bool scores_only = false) {
  auto md = gguf_tokenizer_metadata(dir);
  if (!md.ok()) throw Error(md.status());
  io::GgufMetadata all = {{"general.architecture", io::GgufValue::string("llama")}};
  for (auto& kv : md.value())
    if (!(scores_only && kv.first == "tokenizer.ggml.merges")) all.push_back(std::move(kv));
  const fs::path p = temp_path(name);
  const Status s = io::write_gguf(p.string(), all, {});
  if (!s.ok()) throw Error(s);
  return p.string();
}

class GgufTokenizer : public ::testing::TestWithParam<std::string> {};

// "NAME:scores" reads NAME's SentencePiece vocabulary back with merges derived from
// the scores alone (llama.cpp's files); Gemma's tokenizer.json ranks some merges of
// one piece apart, which only the merges loom writes beside the scores keep.
TEST_P(GgufTokenizer, IdsEqualTheLibrarysOnTheCorpus) {
  const std::string param = GetParam();
  const bool scores_only = param.size() > 7 && param.substr(param.size() - 7) == ":scores";
  const std::string oracle_name = scores_only ? param.substr(0, param.size() - 7) : param;
  nlohmann::json corpus, oracle;
  ASSERT_TRUE(test::load_oracle_json("corpus.json", &corpus));
  ASSERT_TRUE(test::load_oracle_json(oracle_name + ".json", &oracle));
  const std::string dir = fs::path(oracle["tokenizer"].get<std::string>()).parent_path().string();
  const std::string path = write_tokenizer_gguf(dir, oracle_name + (scores_only ? "-scores" : ""), scores_only);
  auto from_gguf = Tokenizer::from_gguf(path);
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.status().to_string();
  auto from_dir = Tokenizer::from_dir(dir).value();
  const auto& gg = *from_gguf.value();
  EXPECT_EQ(gg.bos_token_id(), from_dir->bos_token_id());
  EXPECT_EQ(gg.eos_token_id(), from_dir->eos_token_id());
  EXPECT_EQ(gg.chat_templates(), from_dir->chat_templates());
  int failures = 0;
  for (size_t c = 0; c < corpus.size() && failures < 5; ++c) {
    const std::string text = corpus[c]["text"].get<std::string>();
    const std::string name = corpus[c]["name"].get<std::string>();
    const std::vector<int32_t> want = oracle["cases"][c]["without"]["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = gg.encode(text, false).value().ids;
    if (got != want) {
      ++failures;
      size_t k = 0;
      while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
      std::string ctx;
      for (size_t j = k; j < k + 4 && j < got.size(); ++j) ctx += " got:" + gg.id_to_token(got[j]).value_or("?");
      for (size_t j = k; j < k + 4 && j < want.size(); ++j) ctx += " want:" + gg.id_to_token(want[j]).value_or("?");
      ADD_FAILURE() << GetParam() << " case " << name << ": ids differ from the library's (" << got.size() << " vs "
                    << want.size() << " ids) at " << k << ctx;
      continue;
    }
    EXPECT_EQ(gg.encode(text, true).value().ids, from_dir->encode(text, true).value().ids) << name;
    EXPECT_EQ(gg.decode(got, false).value(), oracle["cases"][c]["decode_without"].get<std::string>()) << name;
  }
  fs::remove(path);
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, GgufTokenizer, ::testing::Values("llama3", "qwen3", "llama2", "llama2:scores", "gemma3"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           for (char& c : n) c = c == ':' ? '_' : c;
                           return n;
                         });

TEST(GgufTokenizerFile, BundledModelRoundTrips) {
  const std::string dir = std::string(LOOM_SOURCE_DIR) + "/models/loom-kjv-tiny";
  const std::string path = write_tokenizer_gguf(dir, "kjv");
  auto gg = Tokenizer::from_path(path).value();
  auto st = Tokenizer::from_dir(dir).value();
  for (const char* text : {"In the beginning God created the heaven and the earth.", "  And, lo!\n\tthe 12 ÆON ✓",
                           "<|begin_of_text|>plain"}) {
    EXPECT_EQ(gg->encode(text, true).value().ids, st->encode(text, true).value().ids) << text;
    EXPECT_EQ(gg->encode(text, false).value().ids, st->encode(text, false).value().ids) << text;
  }
  EXPECT_TRUE(Tokenizer::exists_at(path));
  fs::remove(path);
}

TEST(GgufTokenizerFile, BrokenMetadataIsNamed) {
  const fs::path p = temp_path("broken");
  auto expect_error = [&](const io::GgufMetadata& md, const std::string& needle) {
    ASSERT_TRUE(io::write_gguf(p.string(), md, {}).ok());
    auto t = Tokenizer::from_gguf(p.string());
    ASSERT_FALSE(t.ok()) << needle;
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().to_string();
  };
  const auto tokens = io::GgufValue::strings({"a", "b", "ab"});
  expect_error({{"tokenizer.ggml.tokens", tokens}}, "tokenizer.ggml.model");
  expect_error({{"tokenizer.ggml.model", io::GgufValue::string("rwkv")}, {"tokenizer.ggml.tokens", tokens}}, "rwkv");
  expect_error({{"tokenizer.ggml.model", io::GgufValue::string("gpt2")},
                {"tokenizer.ggml.pre", io::GgufValue::string("made-up")},
                {"tokenizer.ggml.tokens", tokens},
                {"tokenizer.ggml.merges", io::GgufValue::strings({"a b"})}},
               "made-up");
  expect_error({{"tokenizer.ggml.model", io::GgufValue::string("gpt2")},
                {"tokenizer.ggml.tokens", tokens},
                {"tokenizer.ggml.merges", io::GgufValue::strings({"a b"})},
                {"tokenizer.ggml.eos_token_id", io::GgufValue::u32(7)}},
               "tokenizer.ggml.eos_token_id");
  expect_error({{"tokenizer.ggml.model", io::GgufValue::string("llama")},
                {"tokenizer.ggml.tokens", tokens},
                {"tokenizer.ggml.scores", io::GgufValue::f32s({0.0f})}},
               "tokenizer.ggml.scores");
  // llama.cpp's "no tokenizer": not a tokenizer to load, and said so.
  expect_error({{"tokenizer.ggml.model", io::GgufValue::string("none")}}, "no tokenizer");
  EXPECT_FALSE(Tokenizer::exists_at(p.string()));
  fs::remove(p);
}

}  // namespace
}  // namespace loom
