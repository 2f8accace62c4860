// GGUF's tokenizer metadata (tokenizer.ggml.*) ⇄ tokenizer.json: see
// src/tokenizer/gguf_tokenizer.cc. Tokenizer::from_gguf builds a tokenizer from a
// file; these are the two translations it and `loom convert --to gguf` use.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/core/status.h"
#include "loom/io/gguf.h"

namespace loom {

// The tokenizer.json and tokenizer_config.json a GGUF file's metadata describes.
struct GgufTokenizerJson {
  nlohmann::json tokenizer;
  nlohmann::json config;
};
Result<GgufTokenizerJson> tokenizer_json_from_gguf(const io::GgufFile& file);

// A checkpoint folder's tokenizer.json + tokenizer_config.json as GGUF metadata:
// byte-level BPE with a pre-tokenizer llama.cpp names (llama-bpe, qwen2, gpt-2) →
// model gpt2; SentencePiece-style BPE (byte fallback, ▁ normalizer) → model llama
// with scores. Anything else is kUnsupported naming what did not match.
Result<std::vector<std::pair<std::string, io::GgufValue>>> gguf_tokenizer_metadata(const std::string& dir);

}  // namespace loom
