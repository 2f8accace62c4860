// The assembled pipeline behind loom::Tokenizer.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "loom/tokenizer/tokenizer.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/components.h"
#include "tokenizer/regex.h"

namespace loom::tok {

// The byte-level BPE pipelines (GPT-2, Llama 3, Qwen, DeepSeek, GPT-4o): no normalizer
// (or NFC over text NFC leaves alone), Split pre-tokenizers, then ByteLevel without a
// prefix space. Every alignment stays the identity, so pieces are byte ranges of the input
// and no NormalizedString is needed; the result is the same as the general pipeline's.
struct ByteLevelPlan {
  struct Stage {
    std::string literal;
    std::shared_ptr<Regex> re;
    SplitBehavior behavior;
    bool invert;
  };
  bool nfc = false;
  std::vector<Stage> stages;
};

struct TokenizerImpl {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;
  int32_t id_limit = 0;
  int32_t vocab_size = 0;

  nlohmann::json config = nlohmann::json::object();
  std::map<std::string, std::string> chat_templates;
  std::optional<std::string> bos, eos;
  std::optional<int32_t> bos_id, eos_id;

  std::optional<ByteLevelPlan> byte_level_plan;
  bool use_fast_path = true;

  Status encode(std::string_view text, bool add_special_tokens, Encoding* out) const;
  // The general pipeline, filling ids, tokens and byte offsets.
  Status encode_general(std::string_view text, EncodingData& enc) const;
  // The byte-level fast path; false when this text needs the general pipeline.
  bool encode_byte_level(std::string_view text, EncodingData& enc) const;
  // The token string of an id (added tokens first), or null when out of range.
  const std::string* id_to_token(int32_t id) const;
  // Token strings → text through the decoder (no decoder: joined by spaces).
  Status decode_tokens(std::vector<std::string>& tokens, std::string* out) const;
  // ids → token strings, dropping special tokens when asked; fails on unknown ids.
  Status ids_to_tokens(const int32_t* ids, size_t n, bool skip_special, std::vector<std::string>* out) const;
};

// Tests run the byte-level tokenizers through both pipelines.
void set_fast_path_for_testing(const Tokenizer& t, bool enabled);
bool has_fast_path(const Tokenizer& t);

// The fast-path plan for a tokenizer.json, when its shape allows one.
std::optional<ByteLevelPlan> detect_byte_level_plan(const json& j);

// Parses tokenizer.json text; `name` prefixes error messages.
Result<std::unique_ptr<TokenizerImpl>> parse_tokenizer_json(std::string_view text, const std::string& name);

}  // namespace loom::tok
