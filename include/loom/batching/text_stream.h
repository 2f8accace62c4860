// Turns a sequence's tokens into text as they arrive: the tokenizer's incremental
// detokenizer, adapted by the caller (TokenizerTextStream, Python's own).
#pragma once

#include <cstdint>
#include <string>

#include "loom/core/status.h"

namespace loom::batching {

class TextStream {
 public:
  virtual ~TextStream() = default;
  virtual Result<std::string> push(int32_t id) = 0;
  virtual Result<std::string> flush() = 0;
};

}  // namespace loom::batching
