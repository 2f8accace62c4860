// When a sequence ends and what text it shows, token by token: the one path that
// single-request generate() and the batching loop share. EOS ends it and is not
// shown; a stop string ends it with the text cut just before it (text that could
// still become one is held back); a grammar that admits nothing more ends it as
// EOS would; max_new_tokens ends it with "length". At the end, whatever the
// detokenizer and the stop matcher held back is shown, unless a stop string ended it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/batching/text_stream.h"
#include "loom/core/status.h"
#include "loom/generation/stopping.h"
#include "loom/structured/constraint.h"

namespace loom::batching {

class TokenFinisher {
 public:
  TokenFinisher() = default;
  // `text` (not owned; may be null: no text, and then no stop strings) must outlive this.
  TokenFinisher(std::vector<int32_t> eos_token_ids, std::vector<std::string> stop_strings, int64_t max_new_tokens,
                TextStream* text);

  // Sampled token `id`, making `generated` tokens in all: the grammar (if any)
  // accepts it, its text (if any) goes through the stop matcher, and what may be
  // shown is appended to `shown`. kNone: the sequence goes on. Errors come from the
  // grammar or the detokenizer.
  Result<generation::FinishReason> accept(int32_t id, int64_t generated, structured::ConstraintState* constraint,
                                          std::string& shown);
  // The sequence ended for `reason`: appends to `shown` what was held back.
  Status finish(generation::FinishReason reason, std::string& shown);

  bool is_eos(int32_t id) const;
  const std::vector<int32_t>& eos_token_ids() const { return eos_; }
  const std::vector<std::string>& stop_strings() const { return stop_strings_; }
  int64_t max_new_tokens() const { return max_new_tokens_; }

 private:
  std::vector<int32_t> eos_;
  std::vector<std::string> stop_strings_;
  int64_t max_new_tokens_ = 0;
  TextStream* text_ = nullptr;
  generation::StopStringMatcher stops_;
};

}  // namespace loom::batching
