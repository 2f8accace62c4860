// One line of `loom batch` input (a JSON object) → a BatchInput:
//   {"id": .., "prompt": "..."} or {"prompt_ids": [...]}, with optional
//   max_new_tokens, temperature, top_k, top_p, min_p, repetition_penalty, seed,
//   stop (a string or a list), num_return_sequences.
// Lines come from people we do not know: every error names the line and the field.
#pragma once

#include <cstddef>
#include <string_view>

#include "loom/batching/generate_batch.h"
#include "loom/core/status.h"

namespace loom {
class Tokenizer;
}

namespace loom::batching {

// `tokenizer` encodes a text "prompt" (a null tokenizer makes such a line an
// error that asks for prompt_ids); `line_number` is 1-based, for the messages.
Result<BatchInput> parse_batch_input_line(std::string_view line, size_t line_number, const Tokenizer* tokenizer,
                                          bool add_special_tokens);

}  // namespace loom::batching
