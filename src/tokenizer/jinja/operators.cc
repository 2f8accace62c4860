// Python semantics for the operators, lookups and calls a template performs.
#include <cmath>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <optional>

#include "loom/tokenizer/jinja/builtins.h"
#include "loom/tokenizer/jinja/utf8.h"

namespace loom::jinja {

namespace {

[[noreturn]] void unsupported_operands(const char* op, const Value& a, const Value& b) {
  a.require_defined();
  b.require_defined();
  throw RenderError(std::string("unsupported operand type(s) for ") + op + ": '" + a.type_name() + "' and '" +
                    b.type_name() + "'");
}

void check_overflow(bool overflow) {
  if (overflow) throw RenderError("integer overflow (loom's integers are 64-bit)");
}

// Generous for any prompt, small enough that a template cannot exhaust memory.
constexpr size_t kMaxRepeatResult = size_t{1} << 26;

Value repeat(const Value& seq, int64_t times) {
  const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
  if (times > 0 && unit > 0 && static_cast<uint64_t>(times) > kMaxRepeatResult / unit) {
    throw RenderError("sequence repetition result too large (" + std::to_string(unit) + " x " + std::to_string(times) + ")");
  }
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  List out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return Value(std::move(out), seq.flavor() == ListFlavor::kTuple ? ListFlavor::kTuple : ListFlavor::kList);
}

double python_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value binary_op(BinaryOp op, const Value& a, const Value& b) {
  if (op == BinaryOp::kConcat) return Value(a.to_str() + b.to_str());
  const bool nums = a.is_number() && b.is_number();
  const bool floats = nums && (a.is_float() || b.is_float());
  int64_t r = 0;
  switch (op) {
    case BinaryOp::kAdd:
      if (nums) {
        if (floats) return Value(a.as_double() + b.as_double());
        check_overflow(__builtin_add_overflow(a.as_int(), b.as_int(), &r));
        return Value(r);
      }
      if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
      if (a.is_list() && b.is_list() && (a.flavor() == ListFlavor::kTuple) == (b.flavor() == ListFlavor::kTuple) &&
          (a.flavor() == ListFlavor::kList || a.flavor() == ListFlavor::kTuple) &&
          (b.flavor() == ListFlavor::kList || b.flavor() == ListFlavor::kTuple)) {
        List out = a.as_list();
        out.insert(out.end(), b.as_list().begin(), b.as_list().end());
        return Value(std::move(out), a.flavor());
      }
      if (a.is_string() && !b.is_undefined()) {
        throw RenderError("can only concatenate str (not \"" + b.type_name() + "\") to str");
      }
      unsupported_operands("+", a, b);
    case BinaryOp::kSub:
      if (!nums) unsupported_operands("-", a, b);
      if (floats) return Value(a.as_double() - b.as_double());
      check_overflow(__builtin_sub_overflow(a.as_int(), b.as_int(), &r));
        return Value(r);
    case BinaryOp::kMul:
      if (nums) {
        if (floats) return Value(a.as_double() * b.as_double());
        check_overflow(__builtin_mul_overflow(a.as_int(), b.as_int(), &r));
        return Value(r);
      }
      if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
      if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
      unsupported_operands("*", a, b);
    case BinaryOp::kDiv:
      if (!nums) unsupported_operands("/", a, b);
      if (b.as_double() == 0.0) throw RenderError("division by zero");
      return Value(a.as_double() / b.as_double());
    case BinaryOp::kFloorDiv:
      if (!nums) unsupported_operands("//", a, b);
      if (b.as_double() == 0.0) throw RenderError(floats ? "float floor division by zero" : "integer division or modulo by zero");
      if (floats) return Value(std::floor(a.as_double() / b.as_double()));
      {
        const int64_t x = a.as_int(), y = b.as_int();
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        return Value(q);
      }
    case BinaryOp::kMod:
      if (a.is_string()) {
        if (b.is_list() && b.flavor() == ListFlavor::kTuple) return Value(printf_format(a.as_string(), b.as_list()));
        return Value(printf_format(a.as_string(), List{b}));
      }
      if (!nums) unsupported_operands("%", a, b);
      if (b.as_double() == 0.0) throw RenderError(floats ? "float modulo" : "integer division or modulo by zero");
      if (floats) return Value(python_fmod(a.as_double(), b.as_double()));
      {
        const int64_t x = a.as_int(), y = b.as_int();
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value(m);
      }
    case BinaryOp::kPow:
      if (!nums) unsupported_operands("** or pow()", a, b);
      if (!floats && b.as_int() >= 0) {
        int64_t result = 1, base = a.as_int();
        for (int64_t e = b.as_int(); e > 0; --e) {
          if (__builtin_mul_overflow(result, base, &result)) throw RenderError("integer overflow (loom's integers are 64-bit)");
        }
        return Value(result);
      }
      return Value(std::pow(a.as_double(), b.as_double()));
    case BinaryOp::kConcat:
      break;
  }
  return Value();
}

Value negate(const Value& v) {
  if (v.is_float()) return Value(-v.as_double());
  if (v.is_int() || v.is_bool()) return Value(-v.as_int());
  v.require_defined();
  throw RenderError("bad operand type for unary -: '" + v.type_name() + "'");
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order = code point order
  if (a.is_list() && b.is_list() && (a.flavor() == ListFlavor::kTuple) == (b.flavor() == ListFlavor::kTuple)) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!x[i].equals(y[i])) return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  a.require_defined();
  b.require_defined();
  throw RenderError("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

bool contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case Kind::kString:
      if (!needle.is_string()) {
        needle.require_defined();
        throw RenderError("'in <string>' requires string as left operand, not " + needle.type_name());
      }
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    case Kind::kList:
      for (const Value& v : haystack.as_list()) {
        if (v.equals(needle)) return true;
      }
      return false;
    case Kind::kDict:
      if (haystack.is_namespace()) throw RenderError("argument of type 'Namespace' is not iterable");
      return haystack.as_dict().find(needle) != nullptr;
    case Kind::kUndefined:
      return false;
    default:
      throw RenderError("argument of type '" + haystack.type_name() + "' is not iterable");
  }
}

bool compare(CompareOp op, const Value& a, const Value& b) {
  switch (op) {
    case CompareOp::kEq: return a.equals(b);
    case CompareOp::kNe: return !a.equals(b);
    case CompareOp::kLt: return less_than(a, b);
    case CompareOp::kGt: return less_than(b, a);
    case CompareOp::kLe: return less_than(a, b) || a.equals(b);
    case CompareOp::kGe: return less_than(b, a) || a.equals(b);
    case CompareOp::kIn: return contains(b, a);
    case CompareOp::kNotIn: return !contains(b, a);
  }
  return false;
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kList: return v.as_list();
    case Kind::kDict: {
      if (v.is_namespace()) throw RenderError("'Namespace' object is not iterable");
      List keys;
      for (const auto& e : v.as_dict().entries) keys.push_back(e.first);
      return keys;
    }
    case Kind::kString: {
      List chars;
      std::string ch;
      for (char32_t cp : utf8::decode(v.as_string())) {
        ch.clear();
        utf8::append(ch, cp);
        chars.emplace_back(ch);
      }
      return chars;
    }
    case Kind::kUndefined: return {};
    default: throw RenderError("'" + v.type_name() + "' object is not iterable");
  }
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Kind::kString: return static_cast<int64_t>(utf8::length(v.as_string()));
    case Kind::kList: return static_cast<int64_t>(v.as_list().size());
    case Kind::kDict:
      if (v.is_namespace()) throw RenderError("object of type 'Namespace' has no len()");
      return static_cast<int64_t>(v.as_dict().size());
    case Kind::kUndefined: return 0;
    default: throw RenderError("object of type '" + v.type_name() + "' has no len()");
  }
}

namespace {

std::string object_description(const Value& obj) {
  if (obj.is_none()) return "None";
  return obj.type_name() + " object";
}

// "'dict object'" — built by appending (GCC 12's -Wrestrict misfires on "'" + str).
std::string quoted_description(const Value& obj) {
  std::string s = "'";
  s += object_description(obj);
  s += "'";
  return s;
}

Value missing_attribute(const Value& obj, const std::string& name) {
  std::string hint = quoted_description(obj);
  hint += " has no attribute '";
  hint += name;
  hint += "'";
  return Value::undefined(std::move(hint));
}

// Python index normalization; false when out of range.
bool normalize_index(int64_t& i, int64_t n) {
  if (i < 0) i += n;
  return i >= 0 && i < n;
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) obj.require_defined();
  if (obj.is_namespace()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
    return missing_attribute(obj, name);
  }
  Value method = method_of(obj, name);
  if (!method.is_undefined() || !method.undefined_hint().empty()) return method;
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  }
  return missing_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.require_defined();
  switch (obj.kind()) {
    case Kind::kDict:
      if (!obj.is_namespace()) {
        if (const Value* v = obj.as_dict().find(key)) return *v;
      }
      break;
    case Kind::kList:
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_int();
        const List& items = obj.as_list();
        if (normalize_index(i, static_cast<int64_t>(items.size()))) return items[static_cast<size_t>(i)];
        return Value::undefined(object_description(obj) + " has no element " + std::to_string(key.as_int()));
      }
      break;
    case Kind::kString:
      if (key.is_int() || key.is_bool()) {
        const auto cps = utf8::decode(obj.as_string());
        int64_t i = key.as_int();
        if (normalize_index(i, static_cast<int64_t>(cps.size()))) {
          std::string ch;
          utf8::append(ch, cps[static_cast<size_t>(i)]);
          return Value(std::move(ch));
        }
        return Value::undefined(object_description(obj) + " has no element " + std::to_string(key.as_int()));
      }
      break;
    default:
      break;
  }
  if (key.is_string()) return get_attribute(obj, key.as_string());
  return Value::undefined(quoted_description(obj) + " has no element " + key.repr());
}

Value slice_value(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) obj.require_defined();
  auto bound = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) {
      throw RenderError(std::string("slice ") + what + " must be an integer or None, not " + v.type_name());
    }
    return v.as_int();
  };
  const std::optional<int64_t> start_o = bound(start_v, "start");
  const std::optional<int64_t> stop_o = bound(stop_v, "stop");
  const int64_t step = bound(step_v, "step").value_or(1);
  if (step == 0) throw RenderError("slice step cannot be zero");

  std::vector<char32_t> cps;
  const List* items = nullptr;
  int64_t n;
  if (obj.is_string()) {
    cps = utf8::decode(obj.as_string());
    n = static_cast<int64_t>(cps.size());
  } else if (obj.is_list()) {
    items = &obj.as_list();
    n = static_cast<int64_t>(items->size());
  } else {
    return Value::undefined(quoted_description(obj) + " cannot be sliced");
  }
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t start = adjust(start_o, step < 0 ? n - 1 : 0);
  const int64_t stop = adjust(stop_o, step < 0 ? -1 : n);
  std::vector<int64_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picks.push_back(i);
  if (obj.is_string()) {
    std::string out;
    for (int64_t i : picks) utf8::append(out, cps[static_cast<size_t>(i)]);
    return Value(std::move(out));
  }
  List out;
  out.reserve(picks.size());
  for (int64_t i : picks) out.push_back((*items)[static_cast<size_t>(i)]);
  return Value(std::move(out), obj.flavor() == ListFlavor::kTuple ? ListFlavor::kTuple : ListFlavor::kList);
}

Value call_value(const Value& callee, CallArgs& args) {
  if (callee.is_callable()) return callee.as_function()(args);
  callee.require_defined();
  throw RenderError("'" + callee.type_name() + "' object is not callable");
}

namespace {

template <typename T>
std::string snprintf_string(const char* fmt, T value) {
  const int n = std::snprintf(nullptr, 0, fmt, value);
  if (n < 0) throw RenderError(std::string("bad format '") + fmt + "'");
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), fmt, value);
  out.resize(static_cast<size_t>(n));
  return out;
}

}  // namespace

std::string printf_format(const std::string& fmt, const List& args) {
  std::string out;
  size_t next_arg = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) throw RenderError("incomplete format");
    if (fmt[i] == '%') {
      out += '%';
      continue;
    }
    std::string spec = "%";
    while (i < fmt.size() && std::string("-+ #0").find(fmt[i]) != std::string::npos) spec += fmt[i++];
    while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) spec += fmt[i++];
    if (i < fmt.size() && fmt[i] == '.') {
      spec += fmt[i++];
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) spec += fmt[i++];
    }
    if (i >= fmt.size()) throw RenderError("incomplete format");
    const char conv = fmt[i];
    if (next_arg >= args.size()) throw RenderError("not enough arguments for format string");
    const Value& arg = args[next_arg++];
    // Width/precision come from the template: cap them so output stays bounded.
    if (spec.size() > 12) throw RenderError("format field '" + spec + conv + "' is too wide");
    switch (conv) {
      case 's':
      case 'r': {
        // Python pads and truncates by code point, not byte.
        std::string s = conv == 's' ? arg.to_str() : arg.repr();
        const size_t dot = spec.find('.');
        if (dot != std::string::npos) {
          const size_t precision = std::strtoul(spec.c_str() + dot + 1, nullptr, 10);
          auto cps = utf8::decode(s);
          if (cps.size() > precision) {
            cps.resize(precision);
            s = utf8::encode(cps);
          }
        }
        size_t digits = 1;
        while (digits < spec.size() && !std::isdigit(static_cast<unsigned char>(spec[digits])) && spec[digits] != '.') ++digits;
        const size_t width = digits < spec.size() && spec[digits] != '.' ? std::strtoul(spec.c_str() + digits, nullptr, 10) : 0;
        const size_t len = utf8::length(s);
        const std::string padding(width > len ? width - len : 0, ' ');
        out += spec.find('-') != std::string::npos ? s + padding : padding + s;
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o': {
        if (!arg.is_number()) throw RenderError(std::string("%") + conv + " format: a number is required, not " + arg.type_name());
        const long long v = arg.is_float() ? static_cast<long long>(arg.as_double()) : arg.as_int();
        out += snprintf_string((spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), v);
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!arg.is_number()) throw RenderError(std::string("must be real number, not ") + arg.type_name());
        out += snprintf_string((spec + conv).c_str(), arg.as_double());
        break;
      }
      default:
        throw RenderError(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (next_arg < args.size()) throw RenderError("not all arguments converted during string formatting");
  return out;
}

std::string strftime_local(const std::string& format, int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  if (format.empty()) return "";
  std::vector<char> buf(format.size() * 8 + 256);
  const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
  return std::string(buf.data(), n);
}

}  // namespace loom::jinja
