// The KV cache type flags of the commands that own a contiguous cache (`generate`, `bench`,
// `perplexity`): --kv-cache-dtype for K and V both, --cache-type-k / --cache-type-v for each
// (llama.cpp's -ctk / -ctv), --kv-cache-rotation auto|on|off. `batch` and `serve` take the
// same flags through the ContinuousBatchingConfig (cb_flags.h).
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "loom/graph/kv_format.h"

namespace loom::cli {

struct KvCacheFlags {
  std::string kv_cache_dtype = "float32";
  std::optional<std::string> cache_type_k, cache_type_v;
  std::string rotation = "auto";
};

// The help text shared with cb_flags.cc.
inline constexpr const char* kKvCacheDtypeHelp =
    "KV cache type for K and V: float32 (default), bfloat16, float16 (half the memory), q8_0 (34/128 of f32), "
    "q4_0 (18/128); f32/bf16/f16 also accepted";
inline constexpr const char* kCacheTypeKHelp = "K cache type (overrides --kv-cache-dtype for K; names as it)";
inline constexpr const char* kCacheTypeVHelp = "V cache type (overrides --kv-cache-dtype for V; names as it)";
inline constexpr const char* kKvRotationHelp =
    "Hadamard rotation of K/V per head before storing: auto (q4_0 K or V), on (both), off";

void add_kv_cache_options(CLI::App* cmd, KvCacheFlags* f);
// Throws loom::Error naming the flag for a bad name.
graph::KvFormat kv_format_from_flags(const KvCacheFlags& f);

}  // namespace loom::cli
