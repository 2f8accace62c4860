#include "tokenizer/json_util.h"

#include "tokenizer/unicode.h"

namespace loom::tok {

Result<bool> read_bool(const json& j, const std::string& path, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return field_error(field_path(path, key), "expected true or false");
  return it->get<bool>();
}

Result<std::string> read_string(const json& j, const std::string& path, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return field_error(field_path(path, key), "missing");
  if (!it->is_string()) return field_error(field_path(path, key), "expected a string");
  return it->get<std::string>();
}

Result<std::optional<std::string>> read_opt_string(const json& j, const std::string& path, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) return field_error(field_path(path, key), "expected a string or null");
  return std::optional<std::string>(it->get<std::string>());
}

Result<int64_t> read_int(const json& j, const std::string& path, const char* key, std::optional<int64_t> fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return field_error(field_path(path, key), "missing");
  }
  if (!it->is_number_integer()) return field_error(field_path(path, key), "expected an integer");
  return it->get<int64_t>();
}

Result<const json*> read_array(const json& j, const std::string& path, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return field_error(field_path(path, key), "missing");
  if (!it->is_array()) return field_error(field_path(path, key), "expected an array");
  return &*it;
}

Result<std::string> read_type(const json& j, const std::string& path) {
  if (!j.is_object()) return field_error(path, "expected an object");
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) return field_error(field_path(path, "type"), "missing");
  return it->get<std::string>();
}

Result<char32_t> read_char(const json& j, const std::string& path, const char* key) {
  LOOM_ASSIGN_OR_RETURN(std::string s, read_string(j, path, key));
  if (s.empty() || uni::find_invalid_utf8(s) != std::string::npos) return field_error(field_path(path, key), "expected one character");
  int len;
  char32_t c = uni::decode(s.data(), &len);
  if (static_cast<size_t>(len) != s.size()) return field_error(field_path(path, key), "expected one character, got \"" + s + "\"");
  return c;
}

}  // namespace loom::tok
