// jinja2's built-in tests (`x is defined`, `n is divisibleby 3`, …), 3.1 semantics.
#include <cmath>
#include <unordered_map>

#include "loom/tokenizer/jinja/builtins.h"
#include "loom/tokenizer/jinja/utf8.h"

namespace loom::jinja {

namespace {

Value arg0(CallArgs& a, const char* test) {
  if (a.positional.empty() && a.keyword.empty()) throw RenderError(std::string("test '") + test + "' needs an argument");
  return a.positional.empty() ? a.keyword.front().second : a.positional.front();
}

bool t_defined(const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(const Value& v, CallArgs&) { return v.is_bool(); }
bool t_true(const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(const Value& v, CallArgs&) { return v.is_float(); }
// Python's bool is a Number, so `true is number` holds.
bool t_number(const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(const Value& v, CallArgs&) { return v.is_dict() && !v.is_namespace(); }
// Undefined has len() and __getitem__ in jinja2, so it counts as a sequence.
bool t_sequence(const Value& v, CallArgs&) {
  return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace()) || v.is_undefined();
}
bool t_iterable(const Value& v, CallArgs&) {
  return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace()) || v.is_undefined();
}
bool t_callable(const Value& v, CallArgs&) { return v.is_callable(); }
bool t_escaped(const Value&, CallArgs&) { return false; }

int64_t require_int(const Value& v, const char* test) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  v.require_defined();
  throw RenderError(std::string("test '") + test + "' needs an integer, got " + v.type_name());
}

bool t_odd(const Value& v, CallArgs&) { return require_int(v, "odd") % 2 != 0; }
bool t_even(const Value& v, CallArgs&) { return require_int(v, "even") % 2 == 0; }
bool t_divisibleby(const Value& v, CallArgs& a) {
  const Value d = arg0(a, "divisibleby");
  if (v.is_float() || d.is_float()) {
    const double x = v.as_double(), y = d.as_double();
    if (y == 0) throw RenderError("float modulo");
    return std::fmod(x, y) == 0;
  }
  const int64_t y = require_int(d, "divisibleby");
  if (y == 0) throw RenderError("integer division or modulo by zero");
  return require_int(v, "divisibleby") % y == 0;
}

bool t_eq(const Value& v, CallArgs& a) { return compare(CompareOp::kEq, v, arg0(a, "==")); }
bool t_ne(const Value& v, CallArgs& a) { return compare(CompareOp::kNe, v, arg0(a, "!=")); }
bool t_lt(const Value& v, CallArgs& a) { return compare(CompareOp::kLt, v, arg0(a, "<")); }
bool t_le(const Value& v, CallArgs& a) { return compare(CompareOp::kLe, v, arg0(a, "<=")); }
bool t_gt(const Value& v, CallArgs& a) { return compare(CompareOp::kGt, v, arg0(a, ">")); }
bool t_ge(const Value& v, CallArgs& a) { return compare(CompareOp::kGe, v, arg0(a, ">=")); }
bool t_in(const Value& v, CallArgs& a) { return contains(arg0(a, "in"), v); }

// Python `is`: identity of singletons, small ints and shared containers.
bool t_sameas(const Value& v, CallArgs& a) {
  const Value o = arg0(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::kNone:
    case Kind::kUndefined: return v.is_none();
    case Kind::kBool: return v.as_bool() == o.as_bool();
    case Kind::kInt: return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Kind::kList: return &v.as_list() == &o.as_list();
    case Kind::kDict: return &v.as_dict() == &o.as_dict();
    default: return false;
  }
}

bool t_lower(const Value& v, CallArgs&) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (char32_t c : utf8::decode(v.as_string())) {
    if (!utf8::is_cased_letter(c)) continue;
    cased = true;
    if (utf8::to_lower(c) != c) return false;
  }
  return cased;
}

bool t_upper(const Value& v, CallArgs&) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (char32_t c : utf8::decode(v.as_string())) {
    if (!utf8::is_cased_letter(c)) continue;
    cased = true;
    if (utf8::to_upper(c) != c) return false;
  }
  return cased;
}

bool t_filter(const Value& v, CallArgs&) { return v.is_string() && find_filter(v.as_string()) != nullptr; }
bool t_test(const Value& v, CallArgs&) { return v.is_string() && find_test(v.as_string()) != nullptr; }

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> kTests = {
      {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},         {"boolean", t_boolean},
      {"true", t_true},         {"false", t_false},         {"integer", t_integer},   {"float", t_float},
      {"number", t_number},     {"string", t_string},       {"mapping", t_mapping},   {"sequence", t_sequence},
      {"iterable", t_iterable}, {"callable", t_callable},   {"escaped", t_escaped},   {"odd", t_odd},
      {"even", t_even},         {"divisibleby", t_divisibleby}, {"sameas", t_sameas}, {"lower", t_lower},
      {"upper", t_upper},       {"filter", t_filter},       {"test", t_test},         {"in", t_in},
      {"==", t_eq},             {"eq", t_eq},               {"equalto", t_eq},        {"!=", t_ne},
      {"ne", t_ne},             {"<", t_lt},                {"lt", t_lt},             {"lessthan", t_lt},
      {"<=", t_le},             {"le", t_le},               {">", t_gt},              {"gt", t_gt},
      {"greaterthan", t_gt},    {">=", t_ge},               {"ge", t_ge},
  };
  return kTests;
}

}  // namespace

TestFn find_test(const std::string& name) {
  auto it = tests().find(name);
  return it == tests().end() ? nullptr : it->second;
}

}  // namespace loom::jinja
