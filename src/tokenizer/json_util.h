// Typed reads from tokenizer.json with errors that name the field:
// `pre_tokenizer.pretokenizers[1].behavior: expected a string`.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

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
//
// With tables, a tokenizer.json's model.vocab (when an object of token: id) and
// model.merges are read straight into them, and the DOM holds {} and [] there: as
// DOM nodes (a std::map entry per token, a string per merge) they were two thirds
// of loading Gemma 3's 262k tokens and 515k merges (3.6 s).
struct ModelTables {
  bool has_vocab = false;  // model.vocab was an object
  // In file order; id -1 where the value is not an integer in [0, INT32_MAX].
  std::vector<std::pair<std::string, int64_t>> vocab;
  bool has_merges = false;  // model.merges was an array
  struct Merge {
    enum Kind : uint8_t { kString, kPair, kOther } kind;  // "left right"; [left, right]; anything else
    std::string left, right;  // kString: left is the whole string
  };
  std::vector<Merge> merges;
};
Result<json> parse_json_like_serde(std::string_view text, const std::string& name, ModelTables* tables = nullptr);
double serde_f64(std::string_view number);

// The vocab of a model object as (token, id) pairs in the order a DOM object
// iterates them (by token, the last of equal tokens), from tables when it was read
// there; an error names a bad entry (`model.vocab["x"]: expected a non-negative id`).
Result<std::vector<std::pair<std::string, int32_t>>> read_vocab_entries(const json& model, const std::string& path,
                                                                        ModelTables* tables);

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

// The components listed under `key` of a "Sequence" component, each built by
// `make(item, item_path)`; a null item is an error naming it (`what`: "a decoder").
template <typename T, typename Make>
Result<std::vector<std::unique_ptr<T>>> read_sequence(const json& j, const std::string& path, const char* key,
                                                      const char* what, Make make) {
  LOOM_ASSIGN_OR_RETURN(const json* arr, read_array(j, path, key));
  std::vector<std::unique_ptr<T>> items;
  for (size_t i = 0; i < arr->size(); ++i) {
    const std::string p = field_path(path, key) + "[" + std::to_string(i) + "]";
    if ((*arr)[i].is_null()) return field_error(p, std::string("expected ") + what);
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<T> item, make((*arr)[i], p));
    items.push_back(std::move(item));
  }
  return items;
}

}  // namespace loom::tok
