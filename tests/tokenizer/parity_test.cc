// Parity with the Hugging Face `tokenizers` library (Node binding 0.23.2) on real
// tokenizer.json files and small trained ones: for every corpus case, ids, tokens, char
// offsets and special-token masks with and without special tokens, and decoded text
// (plain and skip_special_tokens) must be identical; so must decodes of random ids.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "loom/tokenizer/incremental_detokenizer.h"
#include "loom/tokenizer/tokenizer.h"
#include "tokenizer/oracle_data.h"
#include "tokenizer/tokenizer_impl.h"

namespace loom {
namespace {

const nlohmann::json& corpus() {
  static nlohmann::json c;
  static bool loaded = false;
  if (!loaded) loaded = test::load_oracle_json("corpus.json", &c);
  return c;
}

std::string show(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20) { char b[8]; std::snprintf(b, sizeof(b), "\\x%02x", c); out += b; }
    else out.push_back(static_cast<char>(c));
  }
  return out;
}

bool valid_utf8(const std::string& s) {
  // Well-formed UTF-8 (Unicode Table 3-7).
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char b = u[i];
    int len = b < 0x80 ? 1 : (b >= 0xC2 && b <= 0xDF) ? 2 : (b >= 0xE0 && b <= 0xEF) ? 3 : (b >= 0xF0 && b <= 0xF4) ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      unsigned char c = u[i + k];
      unsigned char lo = 0x80, hi = 0xBF;
      if (k == 1 && b == 0xE0) lo = 0xA0;
      if (k == 1 && b == 0xED) hi = 0x9F;
      if (k == 1 && b == 0xF0) lo = 0x90;
      if (k == 1 && b == 0xF4) hi = 0x8F;
      if (c < lo || c > hi) return false;
    }
    i += len;
  }
  return true;
}

// Compares one encoding; returns a description of the first difference, or "".
std::string compare(const Encoding& got, const nlohmann::json& want) {
  const auto& ids = want["ids"];
  const auto& toks = want["tokens"];
  const auto& offs = want["offsets"];
  const auto& mask = want["special_mask"];
  size_t n = std::max(got.ids.size(), ids.size());
  for (size_t i = 0; i < n; ++i) {
    bool same = i < got.ids.size() && i < ids.size() && got.ids[i] == ids[i].get<int32_t>() &&
                got.tokens[i] == toks[i].get<std::string>() && got.offsets[i].first == offs[2 * i].get<size_t>() &&
                got.offsets[i].second == offs[2 * i + 1].get<size_t>() &&
                got.special_tokens_mask[i] == mask[i].get<int>();
    if (same) continue;
    std::ostringstream os;
    os << "first difference at token " << i << " (loom " << got.ids.size() << " tokens, library " << ids.size()
       << ")\n";
    for (size_t k = (i >= 3 ? i - 3 : 0); k < std::min(n, i + 4); ++k) {
      os << "  [" << k << "] loom: ";
      if (k < got.ids.size())
        os << got.ids[k] << " '" << show(got.tokens[k]) << "' (" << got.offsets[k].first << "," << got.offsets[k].second
           << ") m" << int(got.special_tokens_mask[k]);
      os << "   library: ";
      if (k < ids.size())
        os << ids[k] << " '" << show(toks[k].get<std::string>()) << "' (" << offs[2 * k] << "," << offs[2 * k + 1]
           << ") m" << mask[k];
      os << "\n";
    }
    return os.str();
  }
  return "";
}

class Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Parity, EncodeAndDecodeMatchTheLibrary) {
  const nlohmann::json& cases = corpus();
  ASSERT_TRUE(cases.is_array());
  // "name" or "name:general" (the byte-level tokenizers without their fast path).
  std::string name_param = GetParam();
  bool general = name_param.size() > 8 && name_param.compare(name_param.size() - 8, 8, ":general") == 0;
  std::string oracle_name = general ? name_param.substr(0, name_param.size() - 8) : name_param;
  nlohmann::json oracle;
  ASSERT_TRUE(test::load_oracle_json(oracle_name + ".json", &oracle));
  auto tok = Tokenizer::from_file(oracle["tokenizer"].get<std::string>());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  if (general) {
    ASSERT_TRUE(tok::has_fast_path(**tok)) << oracle_name << " should have the byte-level fast path";
    tok::set_fast_path_for_testing(**tok, false);
  }
  EXPECT_EQ((*tok)->vocab_size(), oracle["vocab_size"].get<int32_t>());
  const auto& ocases = oracle["cases"];
  ASSERT_EQ(ocases.size(), cases.size()) << "oracle output is stale: rerun scripts/install-test-oracles";

  int failures = 0;
  size_t bytes = 0;
  for (size_t c = 0; c < cases.size() && failures < 8; ++c) {
    const std::string text = cases[c]["text"].get<std::string>();
    const std::string name = cases[c]["name"].get<std::string>();
    bytes += text.size();
    const auto& o = ocases[c];
    for (bool special : {true, false}) {
      auto enc = (*tok)->encode(text, special);
      ASSERT_TRUE(enc.ok()) << name << ": " << enc.status().to_string();
      std::string diff = compare(*enc, o[special ? "with" : "without"]);
      if (!diff.empty()) {
        ++failures;
        ADD_FAILURE() << GetParam() << " case " << name << " (add_special_tokens=" << special << "): " << diff;
        continue;
      }
      auto dec = (*tok)->decode(enc->ids, false);
      ASSERT_TRUE(dec.ok()) << dec.status().to_string();
      std::string want = o[special ? "decode" : "decode_without"].get<std::string>();
      if (*dec != want) {
        ++failures;
        ADD_FAILURE() << GetParam() << " case " << name << ": decode differs\n  loom:    " << show(*dec)
                      << "\n  library: " << show(want);
      }
      // Streaming decode, one id at a time, must add up to the full decode.
      for (bool skip_special : {false, true}) {
        IncrementalDetokenizer stream(*tok, skip_special);
        std::string streamed;
        for (int32_t id : enc->ids) {
          std::string piece = stream.push(id);
          if (!valid_utf8(piece)) {
            ++failures;
            ADD_FAILURE() << GetParam() << " case " << name << ": streamed piece is not valid UTF-8: " << show(piece);
          }
          streamed += piece;
        }
        streamed += stream.flush();
        auto full = (*tok)->decode(enc->ids, skip_special);
        ASSERT_TRUE(full.ok());
        if (streamed != *full) {
          ++failures;
          ADD_FAILURE() << GetParam() << " case " << name << ": streamed decode (skip_special_tokens=" << skip_special
                        << ") differs\n  streamed: " << show(streamed) << "\n  decode:   " << show(*full);
        }
      }
      if (special) {
        auto skip = (*tok)->decode(enc->ids, true);
        ASSERT_TRUE(skip.ok());
        std::string want_skip = o["decode_skip"].get<std::string>();
        if (*skip != want_skip) {
          ++failures;
          ADD_FAILURE() << GetParam() << " case " << name << ": decode(skip_special_tokens) differs\n  loom:    "
                        << show(*skip) << "\n  library: " << show(want_skip);
        }
      }
    }
  }
  EXPECT_GE(bytes, 200u * 1024) << "the parity corpus should hold at least 200 KB";

  for (const auto& r : oracle["random_decodes"]) {
    std::vector<int32_t> ids = r["ids"].get<std::vector<int32_t>>();
    auto d = (*tok)->decode(ids, false);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_EQ(show(*d), show(r["decode"].get<std::string>()));
    auto s = (*tok)->decode(ids, true);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(show(*s), show(r["decode_skip"].get<std::string>()));
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, Parity,
                         ::testing::Values("llama3", "qwen3", "gpt4o", "deepseek_v3", "llama2", "gemma3",
                                           "wordpiece_bert", "wordpiece_alt", "bpe_suffix", "unigram_spm",
                                           "unigram_bytefb", "llama3:general", "qwen3:general", "gpt4o:general",
                                           "deepseek_v3:general"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           for (char& c : n)
                             if (c == ':') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace loom
