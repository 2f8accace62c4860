#include "tokenizer/json_util.h"

#include <cmath>

#include "tokenizer/unicode.h"

namespace loom::tok {

double serde_f64(std::string_view s) {
  static const std::vector<double> pow10 = [] {
    std::vector<double> p;
    for (int i = 0; i <= 308; ++i) p.push_back(std::strtod(("1e" + std::to_string(i)).c_str(), nullptr));
    return p;
  }();
  size_t i = 0;
  bool positive = true;
  if (i < s.size() && s[i] == '-') {
    positive = false;
    ++i;
  }
  auto digit = [&](size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '9'; };
  auto overflows = [](uint64_t a, uint64_t d) {
    constexpr uint64_t kMax = UINT64_MAX;
    return a >= kMax / 10 && (a > kMax / 10 || d > kMax % 10);
  };
  uint64_t significand = 0;
  int64_t exponent = 0;
  // Integer part; digits past u64 only scale the exponent.
  while (digit(i)) {
    uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (overflows(significand, d)) {
      while (digit(i)) {
        ++i;
        ++exponent;
      }
      break;
    }
    significand = significand * 10 + d;
    ++i;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (digit(i)) {
      uint64_t d = static_cast<uint64_t>(s[i] - '0');
      if (overflows(significand, d)) {
        while (digit(i)) ++i;
        break;
      }
      significand = significand * 10 + d;
      --exponent;
      ++i;
    }
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool pos_exp = true;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) pos_exp = s[i++] == '+';
    int64_t e = 0;
    while (digit(i)) {
      e = std::min<int64_t>(e * 10 + (s[i] - '0'), INT32_MAX);
      ++i;
    }
    if (e >= INT32_MAX) return significand == 0 || !pos_exp ? (positive ? 0.0 : -0.0) : (positive ? HUGE_VAL : -HUGE_VAL);
    exponent = pos_exp ? exponent + e : exponent - e;
  }
  double f = static_cast<double>(significand);
  while (true) {
    uint64_t a = static_cast<uint64_t>(exponent < 0 ? -exponent : exponent);
    if (a < pow10.size()) {
      if (exponent >= 0) f *= pow10[a]; else f /= pow10[a];
      break;
    }
    if (f == 0.0 || exponent >= 0) break;
    f /= 1e308;
    exponent += 308;
  }
  return positive ? f : -f;
}

namespace {

// nlohmann's DOM builder with floats re-read from their source text.
struct SerdeFloatSax : nlohmann::detail::json_sax_dom_parser<json> {
  using Base = nlohmann::detail::json_sax_dom_parser<json>;
  using Base::Base;
  bool number_float(json::number_float_t, const json::string_t& s) { return Base::number_float(serde_f64(s), s); }
};

}  // namespace

Result<json> parse_json_like_serde(std::string_view text, const std::string& name) {
  json j;
  try {
    SerdeFloatSax sax(j, true);
    if (!json::sax_parse(text, &sax)) return parse_error(name + ": invalid JSON");
  } catch (const json::exception& e) {
    return parse_error(name + ": invalid JSON: " + e.what());
  }
  return j;
}

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
