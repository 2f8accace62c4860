#include "loom/tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "loom/tokenizer/jinja/utf8.h"

namespace loom::jinja {

namespace {

const std::string kEmpty;

struct Undef {
  std::string hint;
};

}  // namespace

Value::Value(std::string s) : kind_(Kind::kString), ptr_(std::make_shared<std::string>(std::move(s))) {}

Value::Value(List items, ListFlavor flavor)
    : kind_(Kind::kList), flavor_(flavor), ptr_(std::make_shared<List>(std::move(items))) {}

Value::Value(std::shared_ptr<Dict> dict) : kind_(Kind::kDict), ptr_(std::move(dict)) {}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.ptr_ = std::make_shared<Undef>(Undef{std::move(hint)});
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::function(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.ptr_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::empty_dict() { return Value(std::make_shared<Dict>()); }

Value Value::make_namespace() {
  auto d = std::make_shared<Dict>();
  d->is_namespace = true;
  return Value(std::move(d));
}

namespace {

// Deeper JSON than any chat message needs; bounds the recursion below.
constexpr int kMaxJsonDepth = 256;

template <typename Json>
Value json_to_value(const Json& j, int depth = 0) {
  if (depth > kMaxJsonDepth) throw RenderError("JSON value nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(json_to_value(e, depth + 1));
      return Value(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<Dict>();
      d->entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d->entries.emplace_back(Value(it.key()), json_to_value(it.value(), depth + 1));
      return Value(std::move(d));
    }
    default:
      return Value::none();  // binary / discarded: not produced by JSON text
  }
}

}  // namespace

Value Value::from_json(const nlohmann::json& j) { return json_to_value(j); }
Value Value::from_json(const nlohmann::ordered_json& j) { return json_to_value(j); }

bool Value::is_namespace() const { return kind_ == Kind::kDict && as_dict().is_namespace; }

double Value::as_double() const {
  switch (kind_) {
    case Kind::kFloat: return f_;
    case Kind::kInt: return static_cast<double>(i_);
    case Kind::kBool: return b_ ? 1.0 : 0.0;
    default: return 0.0;
  }
}

const std::string& Value::as_string() const {
  return kind_ == Kind::kString ? *static_cast<const std::string*>(ptr_.get()) : kEmpty;
}

const List& Value::as_list() const {
  static const List kNoItems;
  return kind_ == Kind::kList ? *static_cast<const List*>(ptr_.get()) : kNoItems;
}

Dict& Value::as_dict() const { return *static_cast<Dict*>(ptr_.get()); }

const Function& Value::as_function() const { return static_cast<const Callable*>(ptr_.get())->fn; }

const std::string& Value::callable_name() const {
  return kind_ == Kind::kCallable ? static_cast<const Callable*>(ptr_.get())->name : kEmpty;
}

const std::string& Value::undefined_hint() const {
  return (kind_ == Kind::kUndefined && ptr_) ? static_cast<const Undef*>(ptr_.get())->hint : kEmpty;
}

void Value::require_defined() const {
  if (kind_ != Kind::kUndefined) return;
  const std::string& h = undefined_hint();
  throw RenderError(h.empty() ? "value is undefined" : h);
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !as_list().empty();
    case Kind::kDict: return as_dict().is_namespace || as_dict().size() > 0;
    case Kind::kCallable: return true;
  }
  return false;
}

std::string format_python_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci looks like "-1.2345e+17": split sign, digits and exponent.
  bool negative = false;
  size_t pos = 0;
  if (sci[0] == '-') {
    negative = true;
    pos = 1;
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t i = pos; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int exp10 = std::stoi(sci.substr(e + 1));
  const int decpt = exp10 + 1;  // position of the decimal point after the first digit
  std::string out = negative ? "-" : "";
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += ebuf;
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out += digits;
    out.append(static_cast<size_t>(decpt) - digits.size(), '0');
    out += ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decpt));
    out += '.';
    out += digits.substr(static_cast<size_t>(decpt));
  }
  return out;
}

namespace {

// Python's str.isprintable() for non-ASCII code points, minus unassigned ones
// (which would need the full Unicode database).
bool python_printable(char32_t cp) {
  if (cp < 0x20 || cp == 0x7f) return false;
  if (cp < 0x7f) return true;
  if (cp <= 0xa0 || cp == 0xad) return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f)) return false;
  if ((cp >= 0x205f && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206f) || cp == 0x3000) return false;
  if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61c || cp == 0x6dd || cp == 0x70f || cp == 0x180e) return false;
  if ((cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0xe000 && cp <= 0xf8ff)) return false;
  if (cp == 0xfeff || (cp >= 0xfff9 && cp <= 0xfffb) || cp == 0xfffe || cp == 0xffff) return false;
  if (cp >= 0xe0000) return false;
  return true;
}

void append_hex(std::string& out, const char* prefix, uint32_t v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%s%0*x", prefix, width, v);
  out += buf;
}

}  // namespace

std::string python_string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : utf8::decode(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (python_printable(cp)) {
      utf8::append(out, cp);
    } else if (cp < 0x100) {
      append_hex(out, "\\x", cp, 2);
    } else if (cp < 0x10000) {
      append_hex(out, "\\u", cp, 4);
    } else {
      append_hex(out, "\\U", cp, 8);
    }
  }
  out += quote;
  return out;
}

namespace {

void repr_sequence(const List& items, std::string& out, const char* open, const char* close) {
  out += open;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += items[i].repr();
  }
  out += close;
}

}  // namespace

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return as_string();
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "None";
    case Kind::kBool: return b_ ? "True" : "False";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return format_python_float(f_);
    case Kind::kString: return python_string_repr(as_string());
    case Kind::kList: {
      std::string out;
      const List& items = as_list();
      switch (flavor_) {
        case ListFlavor::kList: repr_sequence(items, out, "[", "]"); break;
        case ListFlavor::kTuple: repr_sequence(items, out, "(", items.size() == 1 ? ",)" : ")"); break;
        case ListFlavor::kDictItems: repr_sequence(items, out, "dict_items([", "])"); break;
        case ListFlavor::kDictKeys: repr_sequence(items, out, "dict_keys([", "])"); break;
        case ListFlavor::kDictValues: repr_sequence(items, out, "dict_values([", "])"); break;
      }
      return out;
    }
    case Kind::kDict: {
      const Dict& d = as_dict();
      std::string out = d.is_namespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < d.entries.size(); ++i) {
        if (i) out += ", ";
        out += d.entries[i].first.repr();
        out += ": ";
        out += d.entries[i].second.repr();
      }
      out += d.is_namespace ? "}>" : "}";
      return out;
    }
    case Kind::kCallable: return "<function " + callable_name() + ">";
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList:
      switch (flavor_) {
        case ListFlavor::kTuple: return "tuple";
        case ListFlavor::kDictItems: return "dict_items";
        case ListFlavor::kDictKeys: return "dict_keys";
        case ListFlavor::kDictValues: return "dict_values";
        default: return "list";
      }
    case Kind::kDict: return as_dict().is_namespace ? "Namespace" : "dict";
    case Kind::kCallable: return "function";
  }
  return "object";
}

bool Value::equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (kind_ == Kind::kFloat || o.kind_ == Kind::kFloat) return as_double() == o.as_double();
    return as_int() == o.as_int();
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return as_string() == o.as_string();
    case Kind::kList: {
      if ((flavor_ == ListFlavor::kTuple) != (o.flavor_ == ListFlavor::kTuple)) return false;
      const List& a = as_list();
      const List& b = o.as_list();
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].equals(b[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const Dict& a = as_dict();
      const Dict& b = o.as_dict();
      if (a.is_namespace || b.is_namespace) return &a == &b;
      if (a.size() != b.size()) return false;
      for (const auto& [k, v] : a.entries) {
        const Value* other = b.find(k);
        if (!other || !v.equals(*other)) return false;
      }
      return true;
    }
    case Kind::kCallable: return ptr_ == o.ptr_;
    default: return false;
  }
}

namespace {

void json_escape(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (char32_t cp : utf8::decode(s)) {
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (cp < 0x20) {
          append_hex(out, "\\u", cp, 4);
        } else if (ensure_ascii && cp > 0x7e) {
          if (cp >= 0x10000) {
            const uint32_t v = cp - 0x10000;
            append_hex(out, "\\u", 0xd800 + (v >> 10), 4);
            append_hex(out, "\\u", 0xdc00 + (v & 0x3ff), 4);
          } else {
            append_hex(out, "\\u", cp, 4);
          }
        } else {
          utf8::append(out, cp);
        }
    }
  }
  out += '"';
}

struct JsonWriter {
  int indent;
  bool ensure_ascii;
  bool sort_keys;
  std::string item_sep;
  std::string key_sep;
  std::string out;

  void newline(int level) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
  }

  std::string key_string(const Value& k) {
    switch (k.kind()) {
      case Kind::kString: return k.as_string();
      case Kind::kBool: return k.as_bool() ? "true" : "false";
      case Kind::kNone: return "null";
      case Kind::kInt: return std::to_string(k.as_int());
      case Kind::kFloat: return format_python_float(k.as_double());
      default:
        throw RenderError("keys must be str, int, float, bool or None, not " + k.type_name());
    }
  }

  void write(const Value& v, int level) {
    switch (v.kind()) {
      case Kind::kNone: out += "null"; return;
      case Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
      case Kind::kInt: out += std::to_string(v.as_int()); return;
      case Kind::kFloat: {
        const double d = v.as_double();
        if (std::isnan(d)) out += "NaN";
        else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
        else out += format_python_float(d);
        return;
      }
      case Kind::kString: json_escape(v.as_string(), ensure_ascii, out); return;
      case Kind::kList: {
        const List& items = v.as_list();
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (indent >= 0) newline(level + 1);
          write(items[i], level + 1);
        }
        if (indent >= 0) newline(level);
        out += ']';
        return;
      }
      case Kind::kDict: {
        const Dict& d = v.as_dict();
        if (d.is_namespace) throw RenderError("Object of type Namespace is not JSON serializable");
        if (d.entries.empty()) {
          out += "{}";
          return;
        }
        std::vector<std::pair<std::string, const Value*>> entries;
        entries.reserve(d.entries.size());
        for (const auto& [k, val] : d.entries) entries.emplace_back(key_string(k), &val);
        if (sort_keys) {
          std::stable_sort(entries.begin(), entries.end(),
                           [](const auto& a, const auto& b) { return a.first < b.first; });
        }
        out += '{';
        for (size_t i = 0; i < entries.size(); ++i) {
          if (i) out += item_sep;
          if (indent >= 0) newline(level + 1);
          json_escape(entries[i].first, ensure_ascii, out);
          out += key_sep;
          write(*entries[i].second, level + 1);
        }
        if (indent >= 0) newline(level);
        out += '}';
        return;
      }
      case Kind::kUndefined: throw RenderError("Object of type Undefined is not JSON serializable");
      case Kind::kCallable: throw RenderError("Object of type function is not JSON serializable");
    }
  }
};

}  // namespace

std::string Value::to_json(int indent, bool ensure_ascii, bool sort_keys, const std::string* item_separator,
                           const std::string* key_separator) const {
  JsonWriter w{indent, ensure_ascii, sort_keys, indent >= 0 ? "," : ", ", ": ", {}};
  if (item_separator) w.item_sep = *item_separator;
  if (key_separator) w.key_sep = *key_separator;
  w.write(*this, 0);
  return std::move(w.out);
}

const Value* Dict::find(const Value& key) const {
  for (const auto& e : entries) {
    if (e.first.equals(key)) return &e.second;
  }
  return nullptr;
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& e : entries) {
    if (e.first.is_string() && e.first.as_string() == key) return &e.second;
  }
  return nullptr;
}

void Dict::set(const Value& key, Value value) {
  for (auto& e : entries) {
    if (e.first.equals(key)) {
      e.second = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

Value CallArgs::get(size_t index, const std::string& name, Value fallback) const {
  const Value* kw = nullptr;
  for (const auto& [k, v] : keyword) {
    if (k == name) kw = &v;
  }
  if (index < positional.size()) {
    if (kw) throw RenderError("got multiple values for argument '" + name + "'");
    return positional[index];
  }
  if (kw) return *kw;
  return fallback;
}

bool CallArgs::has(size_t index, const std::string& name) const {
  if (index < positional.size()) return true;
  for (const auto& kv : keyword) {
    if (kv.first == name) return true;
  }
  return false;
}

void CallArgs::check(const std::string& callee, size_t max_positional,
                     std::initializer_list<const char*> allowed) const {
  if (positional.size() > max_positional) {
    throw RenderError(callee + "() takes at most " + std::to_string(max_positional) + " positional argument" +
                      (max_positional == 1 ? "" : "s") + " (" + std::to_string(positional.size()) + " given)");
  }
  for (const auto& kv : keyword) {
    bool ok = false;
    for (const char* a : allowed) {
      if (kv.first == a) ok = true;
    }
    if (!ok) throw RenderError(callee + "() got an unexpected keyword argument '" + kv.first + "'");
  }
}

}  // namespace loom::jinja
