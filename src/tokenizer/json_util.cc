#include "tokenizer/json_util.h"

#include <algorithm>
#include <cmath>

#include "loom/io/json_fields.h"
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

// nlohmann's DOM builder with floats re-read from their source text, and (with
// tables) model.vocab and model.merges read into them instead of the DOM.
class SerdeFloatSax : public nlohmann::detail::json_sax_dom_parser<json> {
 public:
  using Base = nlohmann::detail::json_sax_dom_parser<json>;
  SerdeFloatSax(json& j, ModelTables* tables) : Base(j, true), tables_(tables) {}

  bool null() { return mode_ == Mode::kDom ? Base::null() : other_value(); }
  bool boolean(bool v) { return mode_ == Mode::kDom ? Base::boolean(v) : other_value(); }
  bool number_integer(json::number_integer_t v) {
    if (mode_ == Mode::kDom) return Base::number_integer(v);
    return integer_value(v >= 0 && v <= INT32_MAX ? v : -1);
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (mode_ == Mode::kDom) return Base::number_unsigned(v);
    return integer_value(v <= INT32_MAX ? static_cast<int64_t>(v) : -1);
  }
  bool number_float(json::number_float_t, const json::string_t& s) {
    return mode_ == Mode::kDom ? Base::number_float(serde_f64(s), s) : other_value();
  }
  bool binary(json::binary_t& v) { return mode_ == Mode::kDom ? Base::binary(v) : other_value(); }
  bool string(json::string_t& v) {
    if (mode_ == Mode::kDom) return Base::string(v);
    if (skip_ > 0) return true;
    if (mode_ == Mode::kVocab) return other_value();
    if (in_pair_) {
      pair_.push_back(std::move(v));
    } else {
      tables_->merges.push_back({ModelTables::Merge::kString, std::move(v), {}});
    }
    return true;
  }
  bool key(json::string_t& k) {
    if (mode_ == Mode::kDom) {
      if (depth_ == 1) keys_[2].clear();  // model's last key, once past model
      if (depth_ <= 2) keys_[depth_] = k;
      return Base::key(k);
    }
    if (skip_ == 0 && mode_ == Mode::kVocab) pending_key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t n) {
    if (mode_ == Mode::kDom) {
      if (streams("vocab")) {
        mode_ = Mode::kVocab;
        tables_->has_vocab = true;
        tables_->vocab.clear();  // a later "vocab" key replaces an earlier one, as in a DOM
        return Base::start_object(0) && Base::end_object();
      }
      ++depth_;
      return Base::start_object(n);
    }
    return open_nested();
  }
  bool end_object() {
    if (mode_ == Mode::kDom) {
      --depth_;
      return Base::end_object();
    }
    if (skip_ > 0) --skip_;
    else mode_ = Mode::kDom;  // the vocab object's end
    return true;
  }
  bool start_array(std::size_t n) {
    if (mode_ == Mode::kDom) {
      if (streams("merges")) {
        mode_ = Mode::kMerges;
        tables_->has_merges = true;
        tables_->merges.clear();
        return Base::start_array(0) && Base::end_array();
      }
      ++depth_;
      return Base::start_array(n);
    }
    if (mode_ == Mode::kMerges && skip_ == 0 && !in_pair_) {
      in_pair_ = true;
      pair_.clear();
      pair_bad_ = false;
      return true;
    }
    return open_nested();
  }
  bool end_array() {
    if (mode_ == Mode::kDom) {
      --depth_;
      return Base::end_array();
    }
    if (skip_ > 0) {
      --skip_;
    } else if (in_pair_) {
      in_pair_ = false;
      if (!pair_bad_ && pair_.size() == 2) {
        tables_->merges.push_back({ModelTables::Merge::kPair, std::move(pair_[0]), std::move(pair_[1])});
      } else {
        tables_->merges.push_back({ModelTables::Merge::kOther, {}, {}});
      }
    } else {
      mode_ = Mode::kDom;  // the merges array's end
    }
    return true;
  }

 private:
  enum class Mode { kDom, kVocab, kMerges };

  // Whether the container opening now is model.<name> of the top-level object.
  bool streams(const char* name) const {
    return tables_ && depth_ == 2 && keys_[1] == "model" && keys_[2] == name;
  }
  // A value that is not what the table holds there: a bad entry, named later.
  bool other_value() {
    if (skip_ > 0) return true;
    if (mode_ == Mode::kVocab) tables_->vocab.emplace_back(std::move(pending_key_), -1);
    else if (in_pair_) pair_bad_ = true;
    else tables_->merges.push_back({ModelTables::Merge::kOther, {}, {}});
    return true;
  }
  bool integer_value(int64_t id) {
    if (skip_ > 0) return true;
    if (mode_ == Mode::kVocab) {
      tables_->vocab.emplace_back(std::move(pending_key_), id);
      return true;
    }
    return other_value();
  }
  // A container where the table holds a token or a merge: a bad entry, skipped.
  bool open_nested() {
    if (skip_ == 0) other_value();
    ++skip_;
    return true;
  }

  ModelTables* tables_;
  Mode mode_ = Mode::kDom;
  int depth_ = 0;          // open containers in the DOM
  std::string keys_[3];    // the last key at depths 1 and 2 (the top-level object, model)
  int skip_ = 0;           // containers open inside a bad entry
  std::string pending_key_;
  bool in_pair_ = false, pair_bad_ = false;
  std::vector<std::string> pair_;
};

}  // namespace

Result<json> parse_json_like_serde(std::string_view text, const std::string& name, ModelTables* tables) {
  json j;
  try {
    SerdeFloatSax sax(j, tables);
    if (!json::sax_parse(text, &sax)) return parse_error(name + ": invalid JSON");
  } catch (const json::exception& e) {
    return parse_error(name + ": invalid JSON: " + e.what());
  }
  return j;
}

Result<std::vector<std::pair<std::string, int32_t>>> read_vocab_entries(const json& model, const std::string& path,
                                                                        ModelTables* tables) {
  std::vector<std::pair<std::string, int32_t>> out;
  auto bad = [&](const std::string& token) {
    return field_error(field_path(path, "vocab") + "[\"" + token + "\"]", "expected a non-negative id");
  };
  if (tables && tables->has_vocab) {
    auto& v = tables->vocab;
    // A DOM object's order: by token, the last of equal tokens kept.
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (i + 1 < v.size() && v[i + 1].first == v[i].first) continue;
      if (v[i].second < 0) return bad(v[i].first);
      out.emplace_back(std::move(v[i].first), static_cast<int32_t>(v[i].second));
    }
    v.clear();
    return out;
  }
  auto vit = model.find("vocab");
  if (vit == model.end() || !vit->is_object()) return field_error(field_path(path, "vocab"), "expected an object of token: id");
  out.reserve(vit->size());
  for (auto it = vit->begin(); it != vit->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > INT32_MAX)
      return bad(it.key());
    out.emplace_back(it.key(), static_cast<int32_t>(it.value().get<int64_t>()));
  }
  return out;
}

namespace {

// io's one text for a field of the wrong type, with the field's path in the file.
Status type_error(const std::string& path, const char* key, const char* expected, const json& v) {
  return parse_error(io::field_type_message(field_path(path, key), expected, v));
}

}  // namespace

Result<bool> read_bool(const json& j, const std::string& path, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return type_error(path, key, "true or false", *it);
  return it->get<bool>();
}

Result<std::string> read_string(const json& j, const std::string& path, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return field_error(field_path(path, key), "missing");
  if (!it->is_string()) return type_error(path, key, "a string", *it);
  return it->get<std::string>();
}

Result<std::optional<std::string>> read_opt_string(const json& j, const std::string& path, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) return type_error(path, key, "a string or null", *it);
  return std::optional<std::string>(it->get<std::string>());
}

Result<int64_t> read_int(const json& j, const std::string& path, const char* key, std::optional<int64_t> fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return field_error(field_path(path, key), "missing");
  }
  const std::optional<int64_t> v = io::json_integer(*it);
  if (!v) return type_error(path, key, "an integer", *it);
  return *v;
}

Result<const json*> read_array(const json& j, const std::string& path, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return field_error(field_path(path, key), "missing");
  if (!it->is_array()) return type_error(path, key, "an array", *it);
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
