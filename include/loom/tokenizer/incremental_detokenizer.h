// Streaming detokenization: feed generated ids one at a time, get back the text that is
// final so far. Never returns part of a UTF-8 sequence, keeps the spaces Metaspace and
// byte-level decoders produce mid-text, and the pieces (plus flush()) concatenate to
// decode(all ids). Each push decodes a small window of recent ids (the prefix/read
// offsets of vLLM and TGI), so its cost does not grow with the sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/tokenizer/tokenizer.h"

namespace loom {

class IncrementalDetokenizer {
 public:
  // `context`: ids that precede the stream (e.g. the tail of the prompt) and that are
  // not emitted; they give the first generated tokens their leading spaces.
  explicit IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens = false,
                                  const std::vector<int32_t>& context = {});

  // Text made final by `id` (often empty while a character is incomplete). Throws
  // loom::Error for an id outside the vocabulary.
  std::string push(int32_t id);
  // The text still held back (an incomplete sequence at the very end comes out as U+FFFD,
  // as decode() would produce it). Ends the stream: the next push starts a new one.
  std::string flush();

 private:
  std::string decode_window(size_t begin, size_t end) const;

  std::shared_ptr<const Tokenizer> tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0, read_offset_ = 0;
  std::string prefix_text_;  // decode of ids_[prefix_offset_, read_offset_)
};

}  // namespace loom
