// The one typed reader of JSON fields: config.json, generation_config.json, a
// ContinuousBatchingConfig, batch input lines and the server's request bodies all
// read their fields through it, so they share one set of rules and one error text:
//
//   <where>: field '<name>' must be <what>, got <value>
//
// e.g. "m/config.json: field 'hidden_size' must be an integer, got 2.5".
// Rules: absent and null both read as "not given" (nullopt). An integer field takes a
// JSON integer or a float with no fraction (2.0, which Python's json and some
// exporters write), never 2.5, 1e300 or "2". A number field takes any finite or
// infinite JSON number; a string or bool field only that JSON type.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/core/status.h"

namespace loom::io {

// A JSON value for a message: its text, cut to 40 characters ("2.5", "\"4096\"").
template <class Json>
std::string describe_json(const Json& v) {
  std::string dumped = v.dump();
  return dumped.size() > 40 ? dumped.substr(0, 37) + "..." : dumped;
}

// The integer rule above, for one value.
template <class Json>
std::optional<int64_t> json_integer(const Json& v) {
  if (v.is_number_unsigned()) {
    if (v.template get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(v.template get<uint64_t>());
  }
  if (v.is_number_integer()) return v.template get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.template get<double>();
    // ±9.2e18 is inside int64_t's range, whose ends are not doubles.
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

// "field 'top_k' must be an integer, got 2.5" — the text every reader uses; `name`
// may be a path ("messages[2].content").
template <class Json>
std::string field_type_message(std::string_view name, std::string_view expected, const Json& v) {
  return "field '" + std::string(name) + "' must be " + std::string(expected) + ", got " + describe_json(v);
}

template <class Json>
class BasicJsonFields {
 public:
  // `where` prefixes every message ("dir/config.json", "input line 3"); "" for none.
  BasicJsonFields(const Json& object, std::string where) : obj_(object), where_(std::move(where)) {}

  const std::string& where() const { return where_; }
  const Json& object() const { return obj_; }
  bool present(const char* key) const { return obj_.is_object() && obj_.contains(key); }
  bool is_null(const char* key) const { return present(key) && obj_.at(key).is_null(); }
  bool given(const char* key) const { return present(key) && !obj_.at(key).is_null(); }

  Result<std::optional<int64_t>> int_field(const char* key) const {
    if (!given(key)) return std::optional<int64_t>();
    std::optional<int64_t> v = json_integer(obj_.at(key));
    if (!v) return wrong_type(key, "an integer");
    return v;
  }
  // An integer within [lo, hi] (the range of the type it is read into).
  Result<std::optional<int64_t>> int_field(const char* key, int64_t lo, int64_t hi) const {
    if (!given(key)) return std::optional<int64_t>();
    std::optional<int64_t> v = json_integer(obj_.at(key));
    if (!v || *v < lo || *v > hi)
      return wrong_type(key, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v;
  }
  // A seed: any integer in [0, 2^64).
  Result<std::optional<uint64_t>> uint64_field(const char* key) const {
    if (!given(key)) return std::optional<uint64_t>();
    const Json& v = obj_.at(key);
    if (v.is_number_unsigned()) return std::optional<uint64_t>(v.template get<uint64_t>());
    std::optional<int64_t> i = json_integer(v);
    if (!i || *i < 0) return wrong_type(key, "a non-negative integer");
    return std::optional<uint64_t>(static_cast<uint64_t>(*i));
  }
  Result<std::optional<double>> number_field(const char* key) const {
    if (!given(key)) return std::optional<double>();
    const Json& v = obj_.at(key);
    if (!v.is_number()) return wrong_type(key, "a number");
    return std::optional<double>(v.template get<double>());
  }
  // A finite number that fits a float.
  Result<std::optional<float>> float_field(const char* key) const {
    if (!given(key)) return std::optional<float>();
    const Json& v = obj_.at(key);
    if (!v.is_number() || !std::isfinite(v.template get<double>()) ||
        std::fabs(v.template get<double>()) > static_cast<double>(std::numeric_limits<float>::max()))
      return wrong_type(key, "a finite number");
    return std::optional<float>(static_cast<float>(v.template get<double>()));
  }
  Result<std::optional<bool>> bool_field(const char* key) const {
    if (!given(key)) return std::optional<bool>();
    const Json& v = obj_.at(key);
    if (!v.is_boolean()) return wrong_type(key, "true or false");
    return std::optional<bool>(v.template get<bool>());
  }
  Result<std::optional<std::string>> string_field(const char* key) const {
    if (!given(key)) return std::optional<std::string>();
    const Json& v = obj_.at(key);
    if (!v.is_string()) return wrong_type(key, "a string");
    return std::optional<std::string>(v.template get<std::string>());
  }
  // An int or a list of ints (eos_token_id); empty when not given.
  Result<std::vector<int64_t>> int_or_int_list(const char* key) const {
    std::vector<int64_t> out;
    if (!given(key)) return out;
    const Json& v = obj_.at(key);
    if (!v.is_array()) {
      std::optional<int64_t> i = json_integer(v);
      if (!i) return wrong_type(key, "an integer or a list of integers");
      out.push_back(*i);
      return out;
    }
    for (const Json& e : v) {
      std::optional<int64_t> i = json_integer(e);
      if (!i) return wrong_type(key, "an integer or a list of integers");
      out.push_back(*i);
    }
    return out;
  }
  // A string or a list of strings; empty when not given.
  Result<std::vector<std::string>> string_or_string_list(const char* key) const {
    if (given(key) && obj_.at(key).is_string()) return std::vector<std::string>{obj_.at(key).template get<std::string>()};
    if (given(key) && !obj_.at(key).is_array()) return wrong_type(key, "a string or a list of strings");
    return list_of_strings(key, "a string or a list of strings");
  }
  Result<std::vector<std::string>> string_list(const char* key) const { return list_of_strings(key, "a list of strings"); }

  // The messages, as parse errors (a type) or invalid-argument errors (a value).
  Status missing(const char* key) const { return parse_error(prefix() + "missing required field '" + key + "'"); }
  Status wrong_type(const char* key, std::string_view expected) const {
    return parse_error(prefix() + field_type_message(key, expected, obj_.at(key)));
  }
  Status bad_value(const char* key, const std::string& why) const {
    return invalid_argument(prefix() + "field '" + key + "' " + why);
  }

 private:
  std::string prefix() const { return where_.empty() ? "" : where_ + ": "; }
  Result<std::vector<std::string>> list_of_strings(const char* key, const char* expected) const {
    std::vector<std::string> out;
    if (!given(key)) return out;
    const Json& v = obj_.at(key);
    if (!v.is_array()) return wrong_type(key, expected);
    for (const Json& e : v) {
      if (!e.is_string()) return wrong_type(key, expected);
      out.push_back(e.template get<std::string>());
    }
    return out;
  }

  const Json& obj_;
  std::string where_;
};

using JsonFields = BasicJsonFields<nlohmann::json>;
using OrderedJsonFields = BasicJsonFields<nlohmann::ordered_json>;

}  // namespace loom::io
