// Python methods of str, dict and list that templates call (`content.strip()`,
// `message.get('x')`, `d.items()`). Mutating methods are refused the way
// jinja2's ImmutableSandboxedEnvironment refuses them.
#include <algorithm>
#include <set>

#include "loom/tokenizer/jinja/builtins.h"
#include "loom/tokenizer/jinja/utf8.h"

namespace loom::jinja {

namespace {

using CodePoints = std::vector<char32_t>;

std::string require_str(const Value& v, const std::string& method, const char* what = "argument") {
  if (!v.is_string()) {
    v.require_defined();
    throw RenderError(method + "() " + what + " must be str, not " + v.type_name());
  }
  return v.as_string();
}

// Python str.strip family; chars None → whitespace.
std::string strip_impl(const std::string& s, const Value& chars, bool left, bool right, const std::string& method) {
  const CodePoints cps = utf8::decode(s);
  std::set<char32_t> set;
  const bool ws = chars.is_none() || chars.is_undefined();
  if (!ws) {
    for (char32_t c : utf8::decode(require_str(chars, method, "arg"))) set.insert(c);
  }
  auto strip_me = [&](char32_t c) { return ws ? utf8::is_space(c) : set.count(c) > 0; };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_me(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_me(cps[e - 1])) --e;
  }
  return utf8::encode(CodePoints(cps.begin() + static_cast<std::ptrdiff_t>(b), cps.begin() + static_cast<std::ptrdiff_t>(e)));
}

List split_impl(const std::string& s, const Value& sep_v, int64_t maxsplit, bool from_right) {
  List out;
  if (sep_v.is_none() || sep_v.is_undefined()) {
    const CodePoints cps = utf8::decode(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && utf8::is_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      size_t j = i;
      while (j < cps.size() && !utf8::is_space(cps[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    auto piece = [&](size_t b, size_t e) {
      return Value(utf8::encode(CodePoints(cps.begin() + static_cast<std::ptrdiff_t>(b), cps.begin() + static_cast<std::ptrdiff_t>(e))));
    };
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
      for (auto [b, e] : words) out.push_back(piece(b, e));
      return out;
    }
    if (!from_right) {
      for (int64_t k = 0; k < maxsplit; ++k) out.push_back(piece(words[static_cast<size_t>(k)].first, words[static_cast<size_t>(k)].second));
      size_t rest = words[static_cast<size_t>(maxsplit)].first;
      size_t end = cps.size();
      while (end > rest && utf8::is_space(cps[end - 1])) --end;
      out.push_back(piece(rest, end));
    } else {
      const size_t first_kept = words.size() - static_cast<size_t>(maxsplit);
      size_t begin = 0;
      while (begin < cps.size() && utf8::is_space(cps[begin])) ++begin;
      out.push_back(piece(begin, words[first_kept - 1].second));
      for (size_t k = first_kept; k < words.size(); ++k) out.push_back(piece(words[k].first, words[k].second));
    }
    return out;
  }
  const std::string sep = require_str(sep_v, "split", "separator");
  if (sep.empty()) throw RenderError("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t pos = 0;
    int64_t splits = 0;
    while (maxsplit < 0 || splits < maxsplit) {
      const size_t hit = s.find(sep, pos);
      if (hit == std::string::npos) break;
      parts.push_back(s.substr(pos, hit - pos));
      pos = hit + sep.size();
      ++splits;
    }
    parts.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    int64_t splits = 0;
    std::vector<std::string> rev;
    while (maxsplit < 0 || splits < maxsplit) {
      if (end < sep.size()) break;
      const size_t hit = s.rfind(sep, end - sep.size());
      if (hit == std::string::npos) break;
      rev.push_back(s.substr(hit + sep.size(), end - hit - sep.size()));
      end = hit;
      ++splits;
    }
    rev.push_back(s.substr(0, end));
    parts.assign(rev.rbegin(), rev.rend());
  }
  for (auto& p : parts) out.emplace_back(std::move(p));
  return out;
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

// Converts a Python (start, end) pair of code-point indices into a clamped range.
std::pair<size_t, size_t> sub_range(const CallArgs& a, size_t first_index, size_t n) {
  auto clamp = [n](const Value& v, int64_t dflt) -> int64_t {
    if (v.is_none() || v.is_undefined()) return dflt;
    int64_t x = v.as_int();
    if (x < 0) x = std::max<int64_t>(0, x + static_cast<int64_t>(n));
    return std::min<int64_t>(x, static_cast<int64_t>(n));
  };
  const int64_t b = clamp(a.get(first_index, "start", Value::none()), 0);
  const int64_t e = clamp(a.get(first_index + 1, "end", Value::none()), static_cast<int64_t>(n));
  return {static_cast<size_t>(b), static_cast<size_t>(std::max(b, e))};
}

// Index (in code points) of `needle` in cps[b, e), searching from the left or right.
int64_t find_cps(const CodePoints& cps, const CodePoints& needle, size_t b, size_t e, bool from_right) {
  if (needle.size() > e - b) return -1;
  if (!from_right) {
    for (size_t i = b; i + needle.size() <= e; ++i) {
      if (std::equal(needle.begin(), needle.end(), cps.begin() + static_cast<std::ptrdiff_t>(i))) return static_cast<int64_t>(i);
    }
  } else {
    for (size_t i = e - needle.size() + 1; i-- > b;) {
      if (std::equal(needle.begin(), needle.end(), cps.begin() + static_cast<std::ptrdiff_t>(i))) return static_cast<int64_t>(i);
    }
  }
  return -1;
}

std::string pad(const std::string& s, int64_t width, const Value& fill_v, int where /* -1 left, 0 center, 1 right */,
                const std::string& method) {
  std::string fill = " ";
  if (!fill_v.is_undefined()) {
    fill = require_str(fill_v, method, "fill character");
    if (utf8::length(fill) != 1) throw RenderError("The fill character must be exactly one character long");
  }
  const int64_t len = static_cast<int64_t>(utf8::length(s));
  if (width <= len) return s;
  const int64_t total = width - len;
  int64_t left = 0;
  if (where == 1) left = total;
  else if (where == 0) left = total / 2 + (total & width & 1);  // CPython's centering rule
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return out;
}

// str.format with positional ({}, {0}) and keyword ({name}) fields; format
// specs and conversions are not supported.
std::string str_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
        out += '{';
        ++i;
        continue;
      }
      const size_t close = fmt.find('}', i);
      if (close == std::string::npos) throw RenderError("Single '{' encountered in format string");
      const std::string field = fmt.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) {
        throw RenderError("str.format(): format specs, conversions and attribute fields are not supported");
      }
      Value v;
      if (field.empty()) {
        if (auto_index >= a.positional.size()) throw RenderError("Replacement index " + std::to_string(auto_index) + " out of range for positional args tuple");
        v = a.positional[auto_index++];
      } else if (field.size() < 10 && std::all_of(field.begin(), field.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
        const size_t idx = std::strtoul(field.c_str(), nullptr, 10);
        if (idx >= a.positional.size()) throw RenderError("Replacement index " + field + " out of range for positional args tuple");
        v = a.positional[idx];
      } else {
        bool found = false;
        for (const auto& kv : a.keyword) {
          if (kv.first == field) {
            v = kv.second;
            found = true;
          }
        }
        if (!found) throw RenderError("KeyError: '" + field + "'");
      }
      out += v.to_str();
      i = close;
    } else if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      throw RenderError("Single '}' encountered in format string");
    } else {
      out += c;
    }
  }
  return out;
}

template <typename Pred>
Value str_predicate(const std::string& s, Pred pred, bool need_cased = false) {
  const CodePoints cps = utf8::decode(s);
  if (cps.empty()) return Value(false);
  bool any_cased = false;
  for (char32_t c : cps) {
    if (!pred(c, any_cased)) return Value(false);
  }
  return Value(!need_cased || any_cased);
}

bool is_alpha(char32_t c) { return (c < 0x80) ? std::isalpha(static_cast<int>(c)) != 0 : (utf8::is_cased_letter(c) || (c >= 0x3040 && !utf8::is_space(c))); }
bool is_digit_cp(char32_t c) { return c >= '0' && c <= '9'; }

Value string_method(const Value& self, const std::string& name) {
  // Attribute lookups on strings are mostly misses (`content.role`); answer
  // those before building anything.
  static const std::set<std::string> kNames = {
      "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "replace", "upper",
      "lower", "title", "capitalize", "swapcase", "find", "rfind", "index", "rindex", "count", "join", "center",
      "ljust", "rjust", "zfill", "removeprefix", "removesuffix", "partition", "rpartition", "format", "isdigit",
      "isdecimal", "isnumeric", "isalpha", "isalnum", "isspace", "islower", "isupper", "casefold", "encode",
      "expandtabs", "format_map", "isascii", "isidentifier", "isprintable", "istitle", "maketrans", "translate"};
  if (!kNames.count(name)) return Value::undefined();
  const std::string method = "str." + name;
  auto bind = [&](auto fn) {
    return Value::function(method, [self, fn](CallArgs& a) { return fn(self.as_string(), a); });
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return bind([left, right, method](const std::string& s, CallArgs& a) {
      a.check(method, 1, {});
      return Value(strip_impl(s, a.get(0, "chars", Value::none()), left, right, method));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool right = name == "rsplit";
    return bind([right, method](const std::string& s, CallArgs& a) {
      a.check(method, 2, {"sep", "maxsplit"});
      const Value maxsplit = a.get(1, "maxsplit", Value(-1));
      return Value(split_impl(s, a.get(0, "sep", Value::none()), maxsplit.as_int(), right));
    });
  }
  if (name == "splitlines") {
    return bind([method](const std::string& s, CallArgs& a) {
      a.check(method, 1, {"keepends"});
      const bool keep = a.get(0, "keepends", Value(false)).truthy();
      const CodePoints cps = utf8::decode(s);
      List out;
      size_t start = 0;
      for (size_t i = 0; i < cps.size(); ++i) {
        if (!is_line_break(cps[i])) continue;
        size_t end = i + 1;
        if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') end = i + 2;
        out.emplace_back(utf8::encode(CodePoints(cps.begin() + static_cast<std::ptrdiff_t>(start),
                                                 cps.begin() + static_cast<std::ptrdiff_t>(keep ? end : i))));
        start = end;
        i = end - 1;
      }
      if (start < cps.size()) out.emplace_back(utf8::encode(CodePoints(cps.begin() + static_cast<std::ptrdiff_t>(start), cps.end())));
      return Value(std::move(out));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return bind([starts, method](const std::string& s, CallArgs& a) {
      a.check(method, 3, {});
      const Value prefix = a.get(0, "prefix");
      const CodePoints cps = utf8::decode(s);
      auto [b, e] = sub_range(a, 1, cps.size());
      List candidates;
      if (prefix.is_list() && prefix.flavor() == ListFlavor::kTuple) candidates = prefix.as_list();
      else candidates.push_back(prefix);
      for (const Value& c : candidates) {
        const CodePoints p = utf8::decode(require_str(c, method, "first arg"));
        if (p.size() > e - b) continue;
        const auto where = starts ? cps.begin() + static_cast<std::ptrdiff_t>(b)
                                  : cps.begin() + static_cast<std::ptrdiff_t>(e - p.size());
        if (std::equal(p.begin(), p.end(), where)) return Value(true);
      }
      return Value(false);
    });
  }
  if (name == "replace") {
    return bind([method](const std::string& s, CallArgs& a) {
      a.check(method, 3, {});
      const std::string old_s = require_str(a.get(0, "old"), method);
      const std::string new_s = require_str(a.get(1, "new"), method);
      int64_t count = a.get(2, "count", Value(-1)).as_int();
      std::string out;
      if (old_s.empty()) {
        // Python inserts `new` before every character and at the end.
        const CodePoints cps = utf8::decode(s);
        for (size_t i = 0; i <= cps.size(); ++i) {
          if (count < 0 || static_cast<int64_t>(i) < count) out += new_s;
          if (i < cps.size()) utf8::append(out, cps[i]);
        }
        return Value(std::move(out));
      }
      size_t pos = 0;
      while (count != 0) {
        const size_t hit = s.find(old_s, pos);
        if (hit == std::string::npos) break;
        out.append(s, pos, hit - pos);
        out += new_s;
        pos = hit + old_s.size();
        if (count > 0) --count;
      }
      out.append(s, pos, std::string::npos);
      return Value(std::move(out));
    });
  }
  if (name == "upper") return bind([](const std::string& s, CallArgs&) { return Value(utf8::upper(s)); });
  if (name == "lower") return bind([](const std::string& s, CallArgs&) { return Value(utf8::lower(s)); });
  if (name == "title") return bind([](const std::string& s, CallArgs&) { return Value(utf8::title(s)); });
  if (name == "capitalize") return bind([](const std::string& s, CallArgs&) { return Value(utf8::capitalize(s)); });
  if (name == "swapcase") {
    return bind([](const std::string& s, CallArgs&) {
      std::string out;
      for (char32_t c : utf8::decode(s)) {
        const char32_t u = utf8::to_upper(c);
        utf8::append(out, u != c ? u : utf8::to_lower(c));
      }
      return Value(std::move(out));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return bind([name, method](const std::string& s, CallArgs& a) {
      a.check(method, 3, {});
      const CodePoints cps = utf8::decode(s);
      const CodePoints needle = utf8::decode(require_str(a.get(0, "sub"), method));
      auto [b, e] = sub_range(a, 1, cps.size());
      if (name == "count") {
        if (needle.empty()) return Value(static_cast<int64_t>(e - b + 1));
        int64_t n = 0;
        for (size_t i = b; i + needle.size() <= e;) {
          if (std::equal(needle.begin(), needle.end(), cps.begin() + static_cast<std::ptrdiff_t>(i))) {
            ++n;
            i += needle.size();
          } else {
            ++i;
          }
        }
        return Value(n);
      }
      const int64_t at = find_cps(cps, needle, b, e, name[0] == 'r');
      if (at < 0 && (name == "index" || name == "rindex")) throw RenderError("substring not found");
      return Value(at);
    });
  }
  if (name == "join") {
    return bind([method](const std::string& s, CallArgs& a) {
      a.check(method, 1, {});
      std::string out;
      bool first = true;
      for (const Value& v : iterate(a.get(0, "iterable"))) {
        if (!v.is_string()) throw RenderError("sequence item: expected str instance, " + v.type_name() + " found");
        if (!first) out += s;
        out += v.as_string();
        first = false;
      }
      return Value(std::move(out));
    });
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    const int where = name == "center" ? 0 : name == "ljust" ? -1 : 1;
    return bind([where, method](const std::string& s, CallArgs& a) {
      a.check(method, 2, {});
      return Value(pad(s, a.get(0, "width").as_int(), a.get(1, "fillchar"), where, method));
    });
  }
  if (name == "zfill") {
    return bind([method](const std::string& s, CallArgs& a) {
      a.check(method, 1, {});
      const int64_t width = a.get(0, "width").as_int();
      const int64_t len = static_cast<int64_t>(utf8::length(s));
      if (width <= len) return Value(s);
      std::string sign, body = s;
      if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
        sign = s.substr(0, 1);
        body = s.substr(1);
      }
      return Value(sign + std::string(static_cast<size_t>(width - len), '0') + body);
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const bool prefix = name == "removeprefix";
    return bind([prefix, method](const std::string& s, CallArgs& a) {
      a.check(method, 1, {});
      const std::string p = require_str(a.get(0, prefix ? "prefix" : "suffix"), method);
      if (prefix && s.compare(0, p.size(), p) == 0) return Value(s.substr(p.size()));
      if (!prefix && s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0) {
        return Value(s.substr(0, s.size() - p.size()));
      }
      return Value(s);
    });
  }
  if (name == "partition" || name == "rpartition") {
    const bool right = name == "rpartition";
    return bind([right, method](const std::string& s, CallArgs& a) {
      a.check(method, 1, {});
      const std::string sep = require_str(a.get(0, "sep"), method);
      if (sep.empty()) throw RenderError("empty separator");
      const size_t hit = right ? s.rfind(sep) : s.find(sep);
      if (hit == std::string::npos) {
        return right ? Value::tuple({Value(""), Value(""), Value(s)}) : Value::tuple({Value(s), Value(""), Value("")});
      }
      return Value::tuple({Value(s.substr(0, hit)), Value(sep), Value(s.substr(hit + sep.size()))});
    });
  }
  if (name == "format") {
    return bind([](const std::string& s, CallArgs& a) { return Value(str_format(s, a)); });
  }
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") {
    return bind([](const std::string& s, CallArgs&) { return str_predicate(s, [](char32_t c, bool&) { return is_digit_cp(c); }); });
  }
  if (name == "isalpha") {
    return bind([](const std::string& s, CallArgs&) { return str_predicate(s, [](char32_t c, bool&) { return is_alpha(c); }); });
  }
  if (name == "isalnum") {
    return bind([](const std::string& s, CallArgs&) {
      return str_predicate(s, [](char32_t c, bool&) { return is_alpha(c) || is_digit_cp(c); });
    });
  }
  if (name == "isspace") {
    return bind([](const std::string& s, CallArgs&) { return str_predicate(s, [](char32_t c, bool&) { return utf8::is_space(c); }); });
  }
  if (name == "islower" || name == "isupper") {
    const bool lower = name == "islower";
    return bind([lower](const std::string& s, CallArgs&) {
      return str_predicate(
          s,
          [lower](char32_t c, bool& any_cased) {
            if (!utf8::is_cased_letter(c)) return true;
            any_cased = true;
            return lower ? utf8::to_lower(c) == c : utf8::to_upper(c) == c;
          },
          true);
    });
  }
  static const std::set<std::string> kOtherStrMethods = {
      "casefold", "encode", "expandtabs", "format_map", "isascii", "isidentifier", "isprintable", "istitle",
      "maketrans", "translate"};
  if (kOtherStrMethods.count(name)) {
    return Value::function(method, [method](CallArgs&) -> Value {
      throw RenderError(method + "() is not supported by loom's Jinja subset");
    });
  }
  return Value::undefined();
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.");
}

Value dict_method(const Value& self, const std::string& name) {
  static const std::set<std::string> kNames = {"get", "items", "keys", "values", "copy",
                                               "clear", "pop", "popitem", "setdefault", "update"};
  if (!kNames.count(name)) return Value::undefined();  // the common case: `message.role` is an item
  const std::string method = "dict." + name;
  if (name == "get") {
    return Value::function(method, [self, method](CallArgs& a) {
      a.check(method, 2, {});
      if (a.positional.empty()) throw RenderError("get expected at least 1 argument, got 0");
      if (const Value* v = self.as_dict().find(a.positional[0])) return *v;
      return a.positional.size() > 1 ? a.positional[1] : Value::none();
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    const ListFlavor flavor = name == "items" ? ListFlavor::kDictItems : name == "keys" ? ListFlavor::kDictKeys
                                                                                         : ListFlavor::kDictValues;
    return Value::function(method, [self, flavor, method](CallArgs& a) {
      a.check(method, 0, {});
      List out;
      for (const auto& [k, v] : self.as_dict().entries) {
        if (flavor == ListFlavor::kDictItems) out.push_back(Value::tuple({k, v}));
        else out.push_back(flavor == ListFlavor::kDictKeys ? k : v);
      }
      return Value(std::move(out), flavor);
    });
  }
  if (name == "copy") {
    return Value::function(method, [self](CallArgs&) {
      auto d = std::make_shared<Dict>(self.as_dict());
      return Value(std::move(d));
    });
  }
  static const std::set<std::string> kMutating = {"clear", "pop", "popitem", "setdefault", "update"};
  if (kMutating.count(name)) return unsafe(self, name);
  return Value::undefined();
}

Value list_method(const Value& self, const std::string& name) {
  const std::string method = self.type_name() + "." + name;
  if (name == "index" || name == "count") {
    const bool index = name == "index";
    return Value::function(method, [self, index, method](CallArgs& a) {
      a.check(method, 1, {});
      const Value needle = a.get(0, "value");
      int64_t n = 0;
      const List& items = self.as_list();
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].equals(needle)) continue;
        if (index) return Value(static_cast<int64_t>(i));
        ++n;
      }
      if (index) throw RenderError(needle.repr() + " is not in list");
      return Value(n);
    });
  }
  if (name == "copy" && self.flavor() == ListFlavor::kList) {
    return Value::function(method, [self](CallArgs&) { return Value(self.as_list()); });
  }
  static const std::set<std::string> kMutating = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};
  if (self.flavor() == ListFlavor::kList && kMutating.count(name)) return unsafe(self, name);
  return Value::undefined();
}

}  // namespace

// An Undefined without hint means "no such method": the caller falls back to items.
Value method_of(const Value& obj, const std::string& name) {
  if (name.size() >= 2 && name[0] == '_' && name[1] == '_') return unsafe(obj, name);
  switch (obj.kind()) {
    case Kind::kString: return string_method(obj, name);
    case Kind::kDict: return obj.is_namespace() ? Value::undefined() : dict_method(obj, name);
    case Kind::kList: return list_method(obj, name);
    default: return Value::undefined();
  }
}

}  // namespace loom::jinja
