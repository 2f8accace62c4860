// Typed reads from tokenizer.json with errors that name the field:
// `pre_tokenizer.pretokenizers[1].behavior: expected a string`.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "loom/core/status.h"

namespace loom::tok {

using json = nlohmann::json;

inline std::string field_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

inline Status field_error(const std::string& path, const std::string& what) {
  return parse_error(path + ": " + what);
}

// Parses JSON with floats converted the way serde_json (the library's parser, default
// features) converts them: significand as u64, then one multiply/divide by a power of
// ten. That can differ from correct rounding by an ulp, and Unigram's Viterbi breaks
// score ties on exact doubles, so loom must read the same doubles.
Result<json> parse_json_like_serde(std::string_view text, const std::string& name);
double serde_f64(std::string_view number);

// Missing or null → fallback.
Result<bool> read_bool(const json& j, const std::string& path, const char* key, bool fallback);
Result<std::string> read_string(const json& j, const std::string& path, const char* key);
Result<std::optional<std::string>> read_opt_string(const json& j, const std::string& path, const char* key);
Result<int64_t> read_int(const json& j, const std::string& path, const char* key, std::optional<int64_t> fallback);
Result<const json*> read_array(const json& j, const std::string& path, const char* key);
// The component's "type" string.
Result<std::string> read_type(const json& j, const std::string& path);
// A single char field (Metaspace replacement, CharDelimiterSplit delimiter).
Result<char32_t> read_char(const json& j, const std::string& path, const char* key);

}  // namespace loom::tok
