// The five stages of a `tokenizers` pipeline as loom models them: normalizer,
// pre-tokenizer, model, post-processor, decoder. Each is built from its tokenizer.json
// object by a factory that names the offending field on error.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/status.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalized_string.h"

namespace loom::tok {

// A model output token; offsets are bytes of the piece the model saw. `value` is left
// empty when the token's string is the model's vocabulary entry for `id` (most tokens),
// which spares a copy per token.
struct Token {
  int32_t id;
  uint32_t start, end;
  std::string value;
  bool own_value = false;
};

struct Split {
  NormalizedString normalized;
  bool has_tokens = false;
  std::vector<Token> tokens;
};

// The input as it is split, normalized and tokenized (the library's PreTokenizedString).
struct PreTokenizedString {
  std::vector<Split> splits;

  // Replaces every split that has no tokens yet by fn(split) (empty results dropped).
  template <typename Fn>
  Status split(Fn fn) {
    std::vector<Split> out;
    out.reserve(splits.size());
    std::vector<NormalizedString> pieces;
    for (Split& s : splits) {
      if (s.has_tokens) {
        out.push_back(std::move(s));
        continue;
      }
      pieces.clear();
      LOOM_RETURN_IF_ERROR(fn(std::move(s.normalized), pieces));
      for (NormalizedString& p : pieces)
        if (!p.empty()) out.push_back(Split{std::move(p), false, {}});
    }
    splits = std::move(out);
    return Status::Ok();
  }
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual Status normalize(NormalizedString& s) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual Status pre_tokenize(PreTokenizedString& pts) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the tokens of one pre-token (never empty).
  virtual Status tokenize(std::string_view piece, std::vector<Token>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual const std::string* id_to_token(int32_t id) const = 0;
  virtual int32_t vocab_size() const = 0;
  // One past the largest id.
  virtual int32_t id_limit() const = 0;
};

// The encoding under construction; offsets are kept both in chars (what the library's
// bindings report) and in bytes.
struct EncodingData {
  std::vector<int32_t> ids;
  std::vector<std::string> tokens;
  std::vector<std::pair<size_t, size_t>> offsets;
  std::vector<std::pair<size_t, size_t>> byte_offsets;
  std::vector<uint8_t> special_tokens_mask;
  std::vector<uint32_t> type_ids;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual void process(EncodingData& enc, bool add_special_tokens) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual Status decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Factories (json may be null → nullptr for the optional stages).
Result<std::unique_ptr<Normalizer>> make_normalizer(const json& j, const std::string& path);
Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const json& j, const std::string& path);
// tables: model.vocab and model.merges when parse_json_like_serde read them there.
Result<std::unique_ptr<Model>> make_model(const json& j, const std::string& path, ModelTables* tables = nullptr);
// `token_id` resolves special-token strings the processors name.
Result<std::unique_ptr<PostProcessor>> make_post_processor(const json& j, const std::string& path);
Result<std::unique_ptr<Decoder>> make_decoder(const json& j, const std::string& path);

}  // namespace loom::tok
