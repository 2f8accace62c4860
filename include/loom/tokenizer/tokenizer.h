// loom's tokenizer: reads a Hugging Face `tokenizer.json` (+ `tokenizer_config.json`)
// and encodes/decodes exactly as the `tokenizers` library does — same ids, tokens and
// offsets, same decoded text.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/core/status.h"

namespace loom {

class ThreadPool;

struct Encoding {
  std::vector<int32_t> ids;
  std::vector<std::string> tokens;
  // Offsets into the input in chars (Unicode scalar values), what the library's Python
  // and Node bindings return; special tokens added by the post-processor get (0, 0).
  std::vector<std::pair<size_t, size_t>> offsets;
  // The same offsets in bytes of the UTF-8 input (the Rust library's `encode`).
  std::vector<std::pair<size_t, size_t>> byte_offsets;
  std::vector<uint8_t> special_tokens_mask;
  std::vector<uint32_t> type_ids;
};

namespace tok {
struct TokenizerImpl;
}

class Tokenizer {
 public:
  ~Tokenizer();

  // A tokenizer.json file, encoded exactly as the `tokenizers` library would.
  static Result<std::shared_ptr<Tokenizer>> from_file(const std::string& tokenizer_json_path);
  // The same from JSON text; `name` is used in error messages.
  static Result<std::shared_ptr<Tokenizer>> from_json_string(std::string_view json_text,
                                                             const std::string& name = "tokenizer.json");
  // A checkpoint folder: tokenizer.json plus tokenizer_config.json when present, whose
  // add_bos_token / add_eos_token decide whether encode(…, add_special_tokens) adds BOS /
  // EOS (as Transformers' Llama/Gemma fast tokenizers rebuild their post-processor).
  static Result<std::shared_ptr<Tokenizer>> from_dir(const std::string& dir);
  // A file or a folder; a .gguf file (by its magic) goes to from_gguf.
  static Result<std::shared_ptr<Tokenizer>> from_path(const std::string& file_or_dir);
  // The tokenizer a GGUF file's tokenizer.ggml.* metadata describes (src/tokenizer/
  // gguf_tokenizer.cc): `gpt2` (byte-level BPE, pre-tokenizer by tokenizer.ggml.pre)
  // and `llama` (SentencePiece BPE with scores and byte fallback); special tokens
  // from the token types, BOS/EOS and add_bos/add_eos, tokenizer.chat_template.
  static Result<std::shared_ptr<Tokenizer>> from_gguf(const std::string& gguf_path);
  // Whether from_dir(model_path) has something to read: a folder with tokenizer.json,
  // or a GGUF file with tokenizer.ggml.model.
  static bool exists_at(const std::string& model_path);

  // Fails on invalid UTF-8 (naming the byte offset).
  Result<Encoding> encode(std::string_view text, bool add_special_tokens = true) const;
  Result<std::vector<Encoding>> encode_batch(const std::vector<std::string>& texts, bool add_special_tokens,
                                             ThreadPool* pool = nullptr) const;
  // Fails on ids outside the vocabulary (the library silently drops them).
  Result<std::string> decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // Model vocabulary plus added tokens (the library's get_vocab_size(true)).
  int32_t vocab_size() const;
  // One past the largest id decode accepts.
  int32_t id_limit() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special_id(int32_t id) const;

  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;
  std::optional<std::string> bos_token() const;
  std::optional<std::string> eos_token() const;
  // tokenizer_config.json as read (an empty object when there was none).
  const nlohmann::json& tokenizer_config() const;
  // Chat templates from tokenizer_config.json: name → Jinja source ("default" for a
  // single string template).
  const std::map<std::string, std::string>& chat_templates() const;

  // Internal: the pipeline, for the incremental detokenizer.
  const tok::TokenizerImpl& impl() const { return *impl_; }

 private:
  Tokenizer();
  // tokenizer_config.json's effects (BOS/EOS, add_bos/add_eos, chat templates).
  Status apply_config(nlohmann::json config, const std::string& name);
  std::unique_ptr<tok::TokenizerImpl> impl_;
};

}  // namespace loom
