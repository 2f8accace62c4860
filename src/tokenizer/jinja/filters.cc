// jinja2's built-in filters (3.1 semantics), with Transformers' tojson.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "loom/tokenizer/jinja/builtins.h"
#include "loom/tokenizer/jinja/utf8.h"

namespace loom::jinja {

namespace {

// Dotted attribute path ("a.b", "0.name") as jinja2's make_attrgetter resolves it.
Value resolve_attribute(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && part.size() < 19 &&
                         std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = numeric ? get_item(v, Value(static_cast<int64_t>(std::strtoll(part.c_str(), nullptr, 10)))) : get_item(v, Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value attribute_of(const Value& item, const Value& attribute) {
  if (attribute.is_int()) return get_item(item, attribute);
  return resolve_attribute(item, attribute.to_str());
}

// Sort/compare key: strings lower-cased unless case-sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(utf8::lower(v.as_string()));
  return v;
}

List to_list(const Value& v) {
  if (v.is_none()) throw RenderError("'NoneType' object is not iterable");
  if (v.is_number() || v.is_callable()) throw RenderError("'" + v.type_name() + "' object is not iterable");
  return iterate(v);
}

Value f_abs(const Value& v, CallArgs& a) {
  a.check("abs", 0, {});
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) throw RenderError("integer overflow (loom's integers are 64-bit)");
    return Value(static_cast<int64_t>(std::llabs(v.as_int())));
  }
  v.require_defined();
  throw RenderError("bad operand type for abs(): '" + v.type_name() + "'");
}

// Python getattr only: unlike `obj.name`, dict items are not consulted.
Value f_attr(const Value& v, CallArgs& a) {
  a.check("attr", 1, {"name"});
  const std::string name = a.get(0, "name").to_str();
  if (v.is_namespace()) return get_attribute(v, name);
  Value m = method_of(v, name);
  if (m.is_undefined() && m.undefined_hint().empty()) {
    return Value::undefined("'" + v.type_name() + " object' has no attribute '" + name + "'");
  }
  return m;
}

Value f_batch(const Value& v, CallArgs& a) {
  a.check("batch", 2, {"linecount", "fill_with"});
  const int64_t n = a.get(0, "linecount").as_int();
  if (n <= 0) throw RenderError("batch() linecount must be positive");
  const Value fill = a.get(1, "fill_with", Value::none());
  List out, cur;
  for (const Value& item : to_list(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.emplace_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (!fill.is_none()) {
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
    }
    out.emplace_back(std::move(cur));
  }
  return Value(std::move(out));
}

Value f_capitalize(const Value& v, CallArgs& a) {
  a.check("capitalize", 0, {});
  return Value(utf8::capitalize(v.to_str()));
}

Value f_center(const Value& v, CallArgs& a) {
  a.check("center", 1, {"width"});
  const std::string s = v.to_str();
  const int64_t width = a.get(0, "width", Value(80)).as_int();
  const int64_t len = static_cast<int64_t>(utf8::length(s));
  if (width <= len) return Value(s);
  const int64_t total = width - len;
  const int64_t left = total / 2 + (total & width & 1);
  return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
}

Value f_default(const Value& v, CallArgs& a) {
  a.check("default", 2, {"default_value", "boolean"});
  const Value fallback = a.get(0, "default_value", Value(""));
  const bool boolean = a.get(1, "boolean", Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return fallback;
  return v;
}

Value f_dictsort(const Value& v, CallArgs& a) {
  a.check("dictsort", 3, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict() || v.is_namespace()) {
    v.require_defined();
    throw RenderError("dictsort: expected a dict, got " + v.type_name());
  }
  const bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
  const std::string by = a.get(1, "by", Value("key")).to_str();
  const bool reverse = a.get(2, "reverse", Value(false)).truthy();
  if (by != "key" && by != "value") throw RenderError("You can only sort by either \"key\" or \"value\"");
  List items;
  for (const auto& [k, val] : v.as_dict().entries) items.push_back(Value::tuple({k, val}));
  const size_t idx = by == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key(x.as_list()[idx], cs), ky = sort_key(y.as_list()[idx], cs);
    return reverse ? less_than(ky, kx) : less_than(kx, ky);
  });
  return Value(std::move(items));
}

Value f_escape(const Value& v, CallArgs& a) {
  a.check("escape", 0, {});
  std::string out;
  for (char c : v.to_str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(std::move(out));
}

Value f_first(const Value& v, CallArgs& a) {
  a.check("first", 0, {});
  const List items = to_list(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(const Value& v, CallArgs& a) {
  a.check("last", 0, {});
  const List items = to_list(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

// Python float(str) accepts surrounding whitespace, underscores between digits, inf/nan.
bool parse_python_float(const std::string& s, double* out) {
  std::string t;
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  for (size_t i = b; i < e; ++i) {
    if (s[i] != '_') t += s[i];
  }
  if (t.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size();
}

Value f_float(const Value& v, CallArgs& a) {
  a.check("float", 1, {"default"});
  const Value dflt = a.get(0, "default", Value(0.0));
  if (v.is_number()) return Value(v.as_double());
  double d;
  if (v.is_string() && parse_python_float(v.as_string(), &d)) return Value(d);
  return dflt;
}

Value f_format(const Value& v, CallArgs& a) {
  if (!a.keyword.empty()) throw RenderError("format filter: keyword arguments are not supported");
  return Value(printf_format(v.to_str(), a.positional));
}

Value f_indent(const Value& v, CallArgs& a) {
  a.check("indent", 3, {"width", "first", "blank"});
  const Value width = a.get(0, "width", Value(4));
  const std::string indention = width.is_string() ? width.as_string() : std::string(static_cast<size_t>(std::max<int64_t>(0, width.as_int())), ' ');
  const bool first = a.get(1, "first", Value(false)).truthy();
  const bool blank = a.get(2, "blank", Value(false)).truthy();
  CallArgs none;
  const Value lines_v = get_attribute(Value(v.to_str() + "\n"), "splitlines");
  const List lines = call_value(lines_v, none).as_list();
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + indention;
      rv += lines[i].as_string();
    }
  } else if (!lines.empty()) {
    rv = lines[0].as_string();
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].as_string().empty()) rv += indention;
      rv += lines[i].as_string();
    }
  }
  if (first) rv = indention + rv;
  return Value(std::move(rv));
}

Value f_int(const Value& v, CallArgs& a) {
  a.check("int", 2, {"default", "base"});
  const Value dflt = a.get(0, "default", Value(0));
  const int64_t base = a.get(1, "base", Value(10)).as_int();
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    const double d = v.as_double();
    if (!std::isfinite(d)) return dflt;
    return Value(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    std::string t;
    for (char c : v.as_string()) {
      if (c != '_' && !std::isspace(static_cast<unsigned char>(c))) t += c;
    }
    if (!t.empty()) {
      char* end = nullptr;
      errno = 0;
      const long long x = std::strtoll(t.c_str(), &end, static_cast<int>(base == 10 ? 10 : base));
      if (end == t.c_str() + t.size() && errno == 0) return Value(static_cast<int64_t>(x));
    }
    double d;
    if (parse_python_float(v.as_string(), &d) && std::isfinite(d)) return Value(static_cast<int64_t>(d));
  }
  return dflt;
}

Value f_items(const Value& v, CallArgs& a) {
  a.check("items", 0, {});
  if (v.is_undefined()) return Value(List{});
  if (!v.is_dict() || v.is_namespace()) throw RenderError("Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, val] : v.as_dict().entries) out.push_back(Value::tuple({k, val}));
  return Value(std::move(out));
}

Value f_join(const Value& v, CallArgs& a) {
  a.check("join", 2, {"d", "attribute"});
  const std::string sep = a.get(0, "d", Value("")).to_str();
  const Value attribute = a.get(1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (const Value& item : to_list(v)) {
    if (!first) out += sep;
    first = false;
    out += (attribute.is_none() ? item : attribute_of(item, attribute)).to_str();
  }
  return Value(std::move(out));
}

Value f_length(const Value& v, CallArgs& a) {
  a.check("length", 0, {});
  return Value(length_of(v));
}

Value f_list(const Value& v, CallArgs& a) {
  a.check("list", 0, {});
  return Value(to_list(v));
}

Value f_lower(const Value& v, CallArgs& a) {
  a.check("lower", 0, {});
  return Value(utf8::lower(v.to_str()));
}

Value f_upper(const Value& v, CallArgs& a) {
  a.check("upper", 0, {});
  return Value(utf8::upper(v.to_str()));
}

// Not str.title(): jinja2 capitalizes the first character after whitespace or
// one of -([{< and lower-cases the rest, so "1st" stays "1st".
Value f_title(const Value& v, CallArgs& a) {
  a.check("title", 0, {});
  std::string out;
  bool word_start = true;
  for (char32_t c : utf8::decode(v.to_str())) {
    const bool boundary = utf8::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (boundary) {
      utf8::append(out, c);
      word_start = true;
    } else {
      utf8::append(out, word_start ? utf8::to_upper(c) : utf8::to_lower(c));
      word_start = false;
    }
  }
  return Value(std::move(out));
}

Value f_map(const Value& v, CallArgs& a) {
  const List items = to_list(v);
  List out;
  out.reserve(items.size());
  bool has_attribute = false;
  Value attribute, dflt;
  for (const auto& [k, val] : a.keyword) {
    if (k == "attribute") {
      has_attribute = true;
      attribute = val;
    } else if (k == "default") {
      dflt = val;
    }
  }
  if (has_attribute) {
    for (const auto& kv : a.keyword) {
      if (kv.first != "attribute" && kv.first != "default") throw RenderError("Unexpected keyword argument '" + kv.first + "'");
    }
    for (const Value& item : items) {
      Value r = attribute_of(item, attribute);
      out.push_back(r.is_undefined() && !dflt.is_undefined() ? dflt : r);
    }
    return Value(std::move(out));
  }
  if (a.positional.empty()) throw RenderError("map requires a filter argument");
  const std::string name = a.positional[0].to_str();
  FilterFn f = find_filter(name);
  if (!f) throw RenderError("No filter named '" + name + "'.");
  for (const Value& item : items) {
    CallArgs sub;
    sub.positional.assign(a.positional.begin() + 1, a.positional.end());
    sub.keyword = a.keyword;
    out.push_back(f(item, sub));
  }
  return Value(std::move(out));
}

Value min_max(const Value& v, CallArgs& a, bool want_max, const char* name) {
  a.check(name, 2, {"case_sensitive", "attribute"});
  const bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
  const Value attribute = a.get(1, "attribute", Value::none());
  const List items = to_list(v);
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  const Value* best = &items[0];
  Value best_key = sort_key(attribute.is_none() ? items[0] : attribute_of(items[0], attribute), cs);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(attribute.is_none() ? items[i] : attribute_of(items[i], attribute), cs);
    if (want_max ? less_than(best_key, key) : less_than(key, best_key)) {
      best = &items[i];
      best_key = std::move(key);
    }
  }
  return *best;
}

Value f_max(const Value& v, CallArgs& a) { return min_max(v, a, true, "max"); }
Value f_min(const Value& v, CallArgs& a) { return min_max(v, a, false, "min"); }

// select/reject/selectattr/rejectattr share jinja2's prepare_select_or_reject.
Value select_impl(const Value& v, CallArgs& a, bool with_attr, bool keep_matching, const char* name) {
  size_t next = 0;
  Value attribute;
  if (with_attr) {
    if (a.positional.empty()) throw RenderError(std::string(name) + "() missing the attribute argument");
    attribute = a.positional[next++];
  }
  TestFn test = nullptr;
  CallArgs test_args;
  if (next < a.positional.size()) {
    const std::string test_name = a.positional[next++].to_str();
    test = find_test(test_name);
    if (!test) throw RenderError("No test named '" + test_name + "'.");
    test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(next), a.positional.end());
    test_args.keyword = a.keyword;
  }
  List out;
  for (const Value& item : to_list(v)) {
    const Value subject = with_attr ? attribute_of(item, attribute) : item;
    bool r;
    if (test) {
      CallArgs call = test_args;
      r = test(subject, call);
    } else {
      r = subject.truthy();
    }
    if (r == keep_matching) out.push_back(item);
  }
  return Value(std::move(out));
}

Value f_select(const Value& v, CallArgs& a) { return select_impl(v, a, false, true, "select"); }
Value f_reject(const Value& v, CallArgs& a) { return select_impl(v, a, false, false, "reject"); }
Value f_selectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, true, "selectattr"); }
Value f_rejectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, false, "rejectattr"); }

Value f_replace(const Value& v, CallArgs& a) {
  a.check("replace", 3, {"old", "new", "count"});
  CallArgs m;
  m.positional = {Value(a.get(0, "old").to_str()), Value(a.get(1, "new").to_str())};
  const Value count = a.get(2, "count", Value::none());
  if (!count.is_none()) m.positional.push_back(count);
  return call_value(get_attribute(Value(v.to_str()), "replace"), m);
}

Value f_reverse(const Value& v, CallArgs& a) {
  a.check("reverse", 0, {});
  if (v.is_string()) {
    auto cps = utf8::decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value(utf8::encode(cps));
  }
  List items = to_list(v);
  std::reverse(items.begin(), items.end());
  return Value(std::move(items));
}

Value f_round(const Value& v, CallArgs& a) {
  a.check("round", 2, {"precision", "method"});
  const int64_t precision = a.get(0, "precision", Value(0)).as_int();
  const std::string method = a.get(1, "method", Value("common")).to_str();
  if (!v.is_number()) {
    v.require_defined();
    throw RenderError("type " + v.type_name() + " doesn't define __round__ method");
  }
  if (method != "common" && method != "ceil" && method != "floor") {
    throw RenderError("method must be common, ceil or floor");
  }
  const double x = v.as_double();
  if (method == "common") {
    if (v.is_int() || v.is_bool()) return Value(v.as_int());  // Python round(int, n) stays int for n >= 0
    if (precision >= 0 && precision < 300) {
      // printf rounds the exact binary value half-to-even, as Python's round does.
      char buf[400];
      std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), x);
      return Value(std::strtod(buf, nullptr));
    }
    const double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value(std::nearbyint(x / scale) * scale);
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  return Value((method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
}

Value f_safe(const Value& v, CallArgs& a) {
  a.check("safe", 0, {});
  return Value(v.to_str());
}

Value f_sort(const Value& v, CallArgs& a) {
  a.check("sort", 3, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = a.get(0, "reverse", Value(false)).truthy();
  const bool cs = a.get(1, "case_sensitive", Value(false)).truthy();
  const Value attribute = a.get(2, "attribute", Value::none());
  List items = to_list(v);
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) {
    keyed.emplace_back(sort_key(attribute.is_none() ? items[i] : attribute_of(items[i], attribute), cs), i);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? less_than(y.first, x.first) : less_than(x.first, y.first);
  });
  List out;
  for (const auto& k : keyed) out.push_back(items[k.second]);
  return Value(std::move(out));
}

Value f_string(const Value& v, CallArgs& a) {
  a.check("string", 0, {});
  return Value(v.to_str());
}

Value f_sum(const Value& v, CallArgs& a) {
  a.check("sum", 2, {"attribute", "start"});
  const Value attribute = a.get(0, "attribute", Value::none());
  Value total = a.get(1, "start", Value(0));
  for (const Value& item : to_list(v)) {
    total = binary_op(BinaryOp::kAdd, total, attribute.is_none() ? item : attribute_of(item, attribute));
  }
  return total;
}

// Transformers' override: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False), without jinja2's HTML escaping.
Value f_tojson(const Value& v, CallArgs& a) {
  a.check("tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
  const bool ensure_ascii = a.get(0, "ensure_ascii", Value(false)).truthy();
  const Value indent_v = a.get(1, "indent", Value::none());
  const Value separators = a.get(2, "separators", Value::none());
  const bool sort_keys = a.get(3, "sort_keys", Value(false)).truthy();
  int indent = -1;
  if (indent_v.is_int()) {
    indent = static_cast<int>(std::max<int64_t>(0, indent_v.as_int()));
  } else if (!indent_v.is_none()) {
    throw RenderError("tojson: indent must be an integer or None");
  }
  std::string item_sep, key_sep;
  const std::string* item_ptr = nullptr;
  const std::string* key_ptr = nullptr;
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.as_list().size() != 2) {
      throw RenderError("tojson: separators must be an (item_separator, key_separator) pair");
    }
    item_sep = separators.as_list()[0].to_str();
    key_sep = separators.as_list()[1].to_str();
    item_ptr = &item_sep;
    key_ptr = &key_sep;
  }
  return Value(v.to_json(indent, ensure_ascii, sort_keys, item_ptr, key_ptr));
}

Value f_trim(const Value& v, CallArgs& a) {
  a.check("trim", 1, {"chars"});
  CallArgs m;
  const Value chars = a.get(0, "chars", Value::none());
  m.positional.push_back(chars);
  return call_value(get_attribute(Value(v.to_str()), "strip"), m);
}

Value f_truncate(const Value& v, CallArgs& a) {
  a.check("truncate", 4, {"length", "killwords", "end", "leeway"});
  const std::string s = v.to_str();
  const int64_t length = a.get(0, "length", Value(255)).as_int();
  const bool killwords = a.get(1, "killwords", Value(false)).truthy();
  const std::string end = a.get(2, "end", Value("...")).to_str();
  const int64_t leeway = a.get(3, "leeway", Value(5)).as_int();
  const int64_t end_len = static_cast<int64_t>(utf8::length(end));
  if (length < end_len) throw RenderError("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  const auto cps = utf8::decode(s);
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return Value(s);
  const std::vector<char32_t> head(cps.begin(), cps.begin() + (length - end_len));
  if (killwords) return Value(utf8::encode(head) + end);
  std::string result = utf8::encode(head);
  const size_t space = result.rfind(' ');
  if (space != std::string::npos) result.resize(space);
  return Value(result + end);
}

Value f_unique(const Value& v, CallArgs& a) {
  a.check("unique", 2, {"case_sensitive", "attribute"});
  const bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
  const Value attribute = a.get(1, "attribute", Value::none());
  List out, seen;
  for (const Value& item : to_list(v)) {
    Value key = sort_key(attribute.is_none() ? item : attribute_of(item, attribute), cs);
    bool dup = false;
    for (const Value& s : seen) {
      if (s.equals(key)) {
        dup = true;
        break;
      }
    }
    if (dup) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value(std::move(out));
}

Value f_wordcount(const Value& v, CallArgs& a) {
  a.check("wordcount", 0, {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8::decode(v.to_str())) {
    const bool word = c == '_' || (c < 0x80 ? std::isalnum(static_cast<int>(c)) != 0 : !utf8::is_space(c));
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value(n);
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> kFilters = {
      {"abs", f_abs},           {"attr", f_attr},         {"batch", f_batch},       {"capitalize", f_capitalize},
      {"center", f_center},     {"count", f_length},      {"d", f_default},         {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},          {"escape", f_escape},     {"first", f_first},
      {"float", f_float},       {"format", f_format},     {"indent", f_indent},     {"int", f_int},
      {"items", f_items},       {"join", f_join},         {"last", f_last},         {"length", f_length},
      {"list", f_list},         {"lower", f_lower},       {"map", f_map},           {"max", f_max},
      {"min", f_min},           {"reject", f_reject},     {"rejectattr", f_rejectattr}, {"replace", f_replace},
      {"reverse", f_reverse},   {"round", f_round},       {"safe", f_safe},         {"select", f_select},
      {"selectattr", f_selectattr}, {"sort", f_sort},     {"string", f_string},     {"sum", f_sum},
      {"title", f_title},       {"tojson", f_tojson},     {"trim", f_trim},         {"truncate", f_truncate},
      {"unique", f_unique},     {"upper", f_upper},       {"wordcount", f_wordcount},
  };
  return kFilters;
}

}  // namespace

FilterFn find_filter(const std::string& name) {
  auto it = filters().find(name);
  return it == filters().end() ? nullptr : it->second;
}

}  // namespace loom::jinja
