// Typed reads of optional fields from a JSON object, with errors that name the
// file and the field. Absent and null both read as "not given" (nullopt); a
// caller that must tell them apart checks is_null() first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/core/status.h"

namespace loom::io {

class JsonFields {
 public:
  // `where` prefixes every message: "dir/config.json" or "dir/config.json: rope_scaling".
  JsonFields(const nlohmann::json& object, std::string where) : obj_(object), where_(std::move(where)) {}

  const std::string& where() const { return where_; }
  bool present(const char* key) const { return obj_.contains(key); }
  bool is_null(const char* key) const { return present(key) && obj_.at(key).is_null(); }
  bool given(const char* key) const { return present(key) && !obj_.at(key).is_null(); }

  // Integers also accept integral floats (4096.0), which some exporters write.
  Result<std::optional<int64_t>> int_field(const char* key) const;
  Result<std::optional<double>> number_field(const char* key) const;
  Result<std::optional<bool>> bool_field(const char* key) const;
  Result<std::optional<std::string>> string_field(const char* key) const;
  // An int or a list of ints (eos_token_id); empty when not given.
  Result<std::vector<int64_t>> int_or_int_list(const char* key) const;
  // A string or a list of strings; empty when not given.
  Result<std::vector<std::string>> string_or_string_list(const char* key) const;
  Result<std::vector<std::string>> string_list(const char* key) const;

  Status missing(const char* key) const { return parse_error(where_ + ": missing required field '" + key + "'"); }
  Status wrong_type(const char* key, const char* expected) const;
  Status bad_value(const char* key, const std::string& why) const {
    return invalid_argument(where_ + ": field '" + key + "' " + why);
  }

 private:
  const nlohmann::json& obj_;
  std::string where_;
};

// "string \"4096\"", "array [1,2]" — for messages.
std::string describe_json(const nlohmann::json& v);

}  // namespace loom::io
