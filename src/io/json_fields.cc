#include "io/json_fields.h"

#include <cmath>

namespace loom::io {
namespace {

std::optional<int64_t> as_int(const nlohmann::json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

}  // namespace

std::string describe_json(const nlohmann::json& v) {
  std::string dumped = v.dump();
  if (dumped.size() > 40) dumped = dumped.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + dumped;
}

Status JsonFields::wrong_type(const char* key, const char* expected) const {
  return parse_error(where_ + ": field '" + key + "' must be " + expected + ", got " + describe_json(obj_.at(key)));
}

Result<std::optional<int64_t>> JsonFields::int_field(const char* key) const {
  if (!given(key)) return std::optional<int64_t>();
  std::optional<int64_t> v = as_int(obj_.at(key));
  if (!v) return wrong_type(key, "an integer");
  return v;
}

Result<std::optional<double>> JsonFields::number_field(const char* key) const {
  if (!given(key)) return std::optional<double>();
  const nlohmann::json& v = obj_.at(key);
  if (!v.is_number()) return wrong_type(key, "a number");
  return std::optional<double>(v.get<double>());
}

Result<std::optional<bool>> JsonFields::bool_field(const char* key) const {
  if (!given(key)) return std::optional<bool>();
  const nlohmann::json& v = obj_.at(key);
  if (!v.is_boolean()) return wrong_type(key, "true or false");
  return std::optional<bool>(v.get<bool>());
}

Result<std::optional<std::string>> JsonFields::string_field(const char* key) const {
  if (!given(key)) return std::optional<std::string>();
  const nlohmann::json& v = obj_.at(key);
  if (!v.is_string()) return wrong_type(key, "a string");
  return std::optional<std::string>(v.get<std::string>());
}

Result<std::vector<int64_t>> JsonFields::int_or_int_list(const char* key) const {
  std::vector<int64_t> out;
  if (!given(key)) return out;
  const nlohmann::json& v = obj_.at(key);
  if (!v.is_array()) {
    std::optional<int64_t> i = as_int(v);
    if (!i) return wrong_type(key, "an integer or a list of integers");
    out.push_back(*i);
    return out;
  }
  for (const nlohmann::json& e : v) {
    std::optional<int64_t> i = as_int(e);
    if (!i) return wrong_type(key, "an integer or a list of integers");
    out.push_back(*i);
  }
  return out;
}

Result<std::vector<std::string>> JsonFields::string_or_string_list(const char* key) const {
  if (given(key) && obj_.at(key).is_string()) return std::vector<std::string>{obj_.at(key).get<std::string>()};
  return string_list(key);
}

Result<std::vector<std::string>> JsonFields::string_list(const char* key) const {
  std::vector<std::string> out;
  if (!given(key)) return out;
  const nlohmann::json& v = obj_.at(key);
  if (!v.is_array()) return wrong_type(key, "a list of strings");
  for (const nlohmann::json& e : v) {
    if (!e.is_string()) return wrong_type(key, "a list of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace loom::io
