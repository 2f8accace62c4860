#include "structured/number_range.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <vector>

#include "structured/integer_range.h"

namespace loom::structured {
namespace {

constexpr int kMaxFractionDigits = 16;

// A non-negative decimal exactly: integer digits and fractional digits without
// trailing zeros ("" is .0).
struct Decimal {
  int64_t whole = 0;
  std::string fraction;
};

struct Bound {
  Decimal at;
  bool exclusive = false;
};

// The digit strings d (the part after the point, "" meaning none) of a fraction
// language: `empty` says whether "" belongs; `alts` are GBNF sequences of the
// non-empty ones.
struct Fractions {
  bool empty = false;
  std::vector<std::string> alts;
};

std::string quoted(char c) { return std::string("\"") + c + "\""; }
// `item` repeated lo..hi times ("" when hi is 0).
std::string repeat(const std::string& item, int lo, int hi) {
  if (hi <= 0) return "";
  if (lo == 1 && hi == 1) return item;
  return item + "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
}
std::string then(const std::string& a, const std::string& b) { return b.empty() ? a : a.empty() ? b : a + " " + b; }

Fractions any_digits(int k) { return {true, {repeat("[0-9]", 1, k)}}; }
// Non-empty strings with a non-zero digit: the value is above 0.
std::string nonzero_digits(int k) { return then(repeat("\"0\"", 0, k - 1), then("[1-9]", repeat("[0-9]", 0, k - 1))); }

void prefixed(char c, const Fractions& rest, std::vector<std::string>* out) {
  if (rest.empty) out->push_back(quoted(c));
  for (const std::string& a : rest.alts) out->push_back(then(quoted(c), a));
}

// 0.d ≥ 0.f (> when strict); f has at most k digits.
Fractions at_least(std::string_view f, bool strict, int k) {
  if (f.empty()) return strict ? Fractions{false, {nonzero_digits(k)}} : any_digits(k);
  Fractions out;  // "" is 0, below 0.f
  if (f[0] < '9') out.alts.push_back(then(gbnf_digit_class(static_cast<char>(f[0] + 1), '9'), repeat("[0-9]", 0, k - 1)));
  prefixed(f[0], at_least(f.substr(1), strict, k - 1), &out.alts);
  return out;
}

// 0.d ≤ 0.f (< when strict).
Fractions at_most(std::string_view f, bool strict, int k) {
  if (f.empty()) return strict ? Fractions{} : Fractions{true, {repeat("\"0\"", 1, k)}};
  Fractions out{true, {}};  // f ends in a non-zero digit: "" (0) is below it
  if (f[0] > '0') out.alts.push_back(then(gbnf_digit_class('0', static_cast<char>(f[0] - 1)), repeat("[0-9]", 0, k - 1)));
  prefixed(f[0], at_most(f.substr(1), strict, k - 1), &out.alts);
  return out;
}

// 0.lo ≤ 0.d ≤ 0.hi (either side strict), lo ≤ hi.
Fractions between(std::string_view lo, std::string_view hi, bool lo_strict, bool hi_strict, int k) {
  if (lo.empty() && hi.empty()) return lo_strict || hi_strict ? Fractions{} : Fractions{true, {repeat("\"0\"", 1, k)}};
  Fractions out;
  out.empty = lo.empty() && !lo_strict;  // hi is not empty here: 0 < 0.hi
  const char l = lo.empty() ? '0' : lo[0], h = hi.empty() ? '0' : hi[0];
  const std::string_view lo_rest = lo.empty() ? lo : lo.substr(1), hi_rest = hi.empty() ? hi : hi.substr(1);
  if (l == h) {
    prefixed(l, between(lo_rest, hi_rest, lo_strict, hi_strict, k - 1), &out.alts);
    return out;
  }
  prefixed(l, at_least(lo_rest, lo_strict, k - 1), &out.alts);
  if (h - l >= 2)
    out.alts.push_back(then(gbnf_digit_class(static_cast<char>(l + 1), static_cast<char>(h - 1)), repeat("[0-9]", 0, k - 1)));
  prefixed(h, at_most(hi_rest, hi_strict, k - 1), &out.alts);
  return out;
}

// `whole` then the fractions: "" when they are only "", nothing when they are none.
std::optional<std::string> with_fraction(const std::string& whole, const Fractions& f) {
  if (f.alts.empty()) return f.empty ? std::optional<std::string>(whole) : std::nullopt;
  std::string alts;
  for (size_t i = 0; i < f.alts.size(); ++i) alts += (i ? " | " : "") + f.alts[i];
  return whole + " (\".\" (" + alts + "))" + (f.empty ? "?" : "");
}

// Magnitudes in [a, b] (b = nullopt: unbounded).
void magnitudes(const Bound& a, const std::optional<Bound>& b, std::vector<std::string>* out) {
  auto add = [&](const std::string& whole, const Fractions& f) {
    if (auto s = with_fraction(whole, f)) out->push_back(*s);
  };
  const std::string a_whole = "\"" + std::to_string(a.at.whole) + "\"";
  if (b && b->at.whole == a.at.whole) {
    add(a_whole, between(a.at.fraction, b->at.fraction, a.exclusive, b->exclusive, kMaxFractionDigits));
    return;
  }
  add(a_whole, at_least(a.at.fraction, a.exclusive, kMaxFractionDigits));
  if (!b || b->at.whole - a.at.whole >= 2) {
    std::optional<int64_t> hi;
    if (b) hi = b->at.whole - 1;
    add(integer_range_gbnf(a.at.whole + 1, hi), any_digits(kMaxFractionDigits));
  }
  if (b) add("\"" + std::to_string(b->at.whole) + "\"", at_most(b->at.fraction, b->exclusive, kMaxFractionDigits));
}

Result<Decimal> decimal_of(double v) {
  const double m = std::fabs(v);
  if (!(m <= 1e15)) return unsupported("beyond ±1e15 is not supported");
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, m, std::chars_format::fixed);  // shortest that round-trips
  if (ec != std::errc()) return unsupported("cannot be written as a decimal");
  std::string s(buf, end);
  Decimal d;
  const size_t dot = s.find('.');
  d.whole = std::stoll(s.substr(0, dot));
  if (dot != std::string::npos) d.fraction = s.substr(dot + 1);
  while (!d.fraction.empty() && d.fraction.back() == '0') d.fraction.pop_back();
  if (static_cast<int>(d.fraction.size()) > kMaxFractionDigits) return unsupported(s + " has more than 16 decimal places");
  return d;
}

}  // namespace

Status check_number_bound(double v) {
  Result<Decimal> d = decimal_of(v);
  return d.ok() ? Status::Ok() : d.status();
}

Result<std::string> number_range_gbnf(std::optional<NumberBound> lo, std::optional<NumberBound> hi) {
  if (lo && hi && (lo->value > hi->value || (lo->value == hi->value && (lo->exclusive || hi->exclusive))))
    return invalid_argument("the number range is empty");
  std::optional<Bound> lo_mag, hi_mag;
  if (lo) {
    LOOM_ASSIGN_OR_RETURN(Decimal d, decimal_of(lo->value));
    lo_mag = Bound{d, lo->exclusive};
  }
  if (hi) {
    LOOM_ASSIGN_OR_RETURN(Decimal d, decimal_of(hi->value));
    hi_mag = Bound{d, hi->exclusive};
  }
  std::vector<std::string> parts;
  // Zero and above: [max(lo, 0), hi].
  if (!hi || hi->value > 0 || (hi->value == 0 && !hi->exclusive)) {
    const Bound from = lo && lo->value >= 0 ? *lo_mag : Bound{};
    magnitudes(from, hi ? hi_mag : std::nullopt, &parts);
  }
  // Below zero: "-" and a magnitude in (0 or |hi|, |lo|], never "-0".
  if (!lo || lo->value < 0) {
    const Bound from = hi && hi->value < 0 ? *hi_mag : Bound{Decimal{}, /*exclusive=*/true};
    std::vector<std::string> negative;
    magnitudes(from, lo ? lo_mag : std::nullopt, &negative);
    for (const std::string& m : negative) parts.push_back("\"-\" " + m);
  }
  if (parts.empty()) return invalid_argument("the number range is empty");
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + ("(" + parts[i] + ")");
  return out + ")";
}

}  // namespace loom::structured
