// Adapts the model's tokenizer to generation (the CLI, the server): encodes the prompt and turns
// streamed token ids into text through the incremental detokenizer.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "loom/batching/generate.h"
#include "loom/tokenizer/incremental_detokenizer.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::batching {

class TokenizerTextStream : public TextStream {
 public:
  explicit TokenizerTextStream(std::shared_ptr<Tokenizer> tok) : tok_(std::move(tok)) { start({}); }

  // Starts a new generation after `prompt`, so the first tokens are spaced as
  // they would be in decode(prompt + generated). Special tokens are not shown.
  void start(const std::vector<int32_t>& prompt) {
    detok_ = std::make_unique<IncrementalDetokenizer>(tok_, /*skip_special_tokens=*/true, prompt);
  }

  Result<std::vector<int32_t>> encode(const std::string& text, bool add_special_tokens) const {
    LOOM_ASSIGN_OR_RETURN(Encoding e, tok_->encode(text, add_special_tokens));
    return e.ids;
  }
  Result<std::string> push(int32_t id) override { return detok_->push(id); }
  Result<std::string> flush() override { return detok_->flush(); }
  const Tokenizer& tokenizer() const { return *tok_; }

 private:
  std::shared_ptr<Tokenizer> tok_;
  std::unique_ptr<IncrementalDetokenizer> detok_;
};

// The checkpoint's tokenizer as a text stream; a null pointer when the folder
// has no tokenizer.json, an error when it has a broken one.
inline Result<std::unique_ptr<TokenizerTextStream>> open_text_stream(const std::string& model_dir) {
  if (!Tokenizer::exists_at(model_dir))
    return std::unique_ptr<TokenizerTextStream>();
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<Tokenizer> tok, Tokenizer::from_dir(model_dir));
  return std::make_unique<TokenizerTextStream>(std::move(tok));
}

}  // namespace loom::batching
