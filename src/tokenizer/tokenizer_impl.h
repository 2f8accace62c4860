// The assembled pipeline behind loom::Tokenizer.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "loom/tokenizer/tokenizer.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/components.h"

namespace loom::tok {

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

  Status encode(std::string_view text, bool add_special_tokens, Encoding* out) const;
  // The token string of an id (added tokens first), or null when out of range.
  const std::string* id_to_token(int32_t id) const;
  // Token strings → text through the decoder (no decoder: joined by spaces).
  Status decode_tokens(std::vector<std::string>& tokens, std::string* out) const;
  // ids → token strings, dropping special tokens when asked; fails on unknown ids.
  Status ids_to_tokens(const int32_t* ids, size_t n, bool skip_special, std::vector<std::string>* out) const;
};

// Parses tokenizer.json text; `name` prefixes error messages.
Result<std::unique_ptr<TokenizerImpl>> parse_tokenizer_json(std::string_view text, const std::string& name);

}  // namespace loom::tok
