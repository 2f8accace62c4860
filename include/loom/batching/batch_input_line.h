// One line of `loom batch` input (a JSON object) → a BatchInput:
//   {"id": .., "prompt": "..."} or {"prompt_ids": [...]}, with optional
//   max_new_tokens, temperature, top_k, top_p, min_p, repetition_penalty, seed,
//   stop (a string or a list), num_return_sequences, and one output constraint:
//   response_format, grammar, regex or choice (loom/structured/request_constraint.h).
// Lines come from people we do not know: every error names the line and the field.
#pragma once

#include <cstddef>
#include <string_view>

#include "loom/batching/generate_batch.h"
#include "loom/core/status.h"

namespace loom {
class Tokenizer;
}

namespace loom::structured {
class ConstraintRegistry;
}

namespace loom::batching {

// `tokenizer` encodes a text "prompt" (a null tokenizer makes such a line an
// error that asks for prompt_ids); `line_number` is 1-based, for the messages.
// `constraints` compiles (and shares between lines) the lines' constraints; without
// it a constrained line is an error.
Result<BatchInput> parse_batch_input_line(std::string_view line, size_t line_number, const Tokenizer* tokenizer,
                                          bool add_special_tokens, structured::ConstraintRegistry* constraints = nullptr);

}  // namespace loom::batching
