// The bytes each vocabulary id contributes to decoded text in the middle of a
// sequence, for grammar-constrained decoding: byte-level BPE through the GPT-2 byte
// table (so partial UTF-8 tokens keep their exact bytes), SentencePiece's <0xNN>
// byte-fallback tokens as their byte, and every other token through the tokenizer's
// own decoder chain after a neighbour (so ▁ and Strip decoders act as they do
// mid-text). Special tokens have no bytes: they never appear in constrained text.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/tokenizer/tokenizer.h"

namespace loom {

// Indexed by id, [0, id_limit()); nullopt for special tokens and ids without a token.
std::vector<std::optional<std::string>> token_byte_strings(const Tokenizer& tokenizer);

}  // namespace loom
