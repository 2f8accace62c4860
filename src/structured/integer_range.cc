#include "structured/integer_range.h"

#include <algorithm>
#include <vector>

namespace loom::structured {
namespace {

constexpr int kMaxDigits = 16;

uint64_t pow10(int n) {
  uint64_t v = 1;
  while (n-- > 0) v *= 10;
  return v;
}

int digits(uint64_t v) {
  int n = 1;
  while (v >= 10) {
    v /= 10;
    ++n;
  }
  return n;
}


// Patterns for the same-length decimal strings lo..hi.
void same_length(const std::string& lo, const std::string& hi, std::vector<std::string>* out) {
  size_t i = 0;
  while (i < lo.size() && lo[i] == hi[i]) ++i;
  const std::string prefix = i ? "\"" + lo.substr(0, i) + "\" " : "";
  if (i == lo.size()) {
    out->push_back("\"" + lo + "\"");
    return;
  }
  const size_t rest = lo.size() - i - 1;
  const std::string any_rest = rest ? " [0-9]{" + std::to_string(rest) + "}" : "";
  const bool lo_rest_zero = lo.find_first_not_of('0', i + 1) == std::string::npos;
  const bool hi_rest_nine = hi.find_first_not_of('9', i + 1) == std::string::npos;
  if (rest == 0 || (lo_rest_zero && hi_rest_nine)) {
    out->push_back(prefix + gbnf_digit_class(lo[i], hi[i]) + any_rest);
    return;
  }
  char first = lo[i], last = hi[i];
  if (!lo_rest_zero) {
    same_length(lo, lo.substr(0, i + 1) + std::string(rest, '9'), out);
    ++first;
  }
  if (!hi_rest_nine) --last;
  if (first <= last) out->push_back(prefix + gbnf_digit_class(first, last) + any_rest);
  if (!hi_rest_nine) same_length(hi.substr(0, i + 1) + std::string(rest, '0'), hi, out);
}

// Non-negative a..b (b = nullopt: no upper bound).
std::string non_negative(uint64_t a, std::optional<uint64_t> b) {
  std::vector<std::string> alts;
  const int top = b ? digits(*b) : kMaxDigits;
  for (int len = digits(a); len <= top; ++len) {
    uint64_t lo = std::max<uint64_t>(a, len == 1 ? 0 : pow10(len - 1));
    uint64_t hi = pow10(len) - 1;
    if (b) hi = std::min(hi, *b);
    if (lo > hi) continue;
    if (!b && lo == pow10(len - 1) && len > 1) {
      // Every number from here up has this length or more.
      alts.push_back("[1-9] [0-9]{" + std::to_string(len - 1) + "," + std::to_string(kMaxDigits - 1) + "}");
      break;
    }
    same_length(std::to_string(lo), std::to_string(hi), &alts);
  }
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

}  // namespace

std::string gbnf_digit_class(char a, char b) {
  return a == b ? std::string("\"") + a + "\"" : std::string("[") + a + "-" + b + "]";
}

std::string integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> parts;
  // Negative part: -m for m in [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    const uint64_t m_lo = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
    std::optional<uint64_t> m_hi;
    if (lo) m_hi = static_cast<uint64_t>(-*lo);
    parts.push_back("\"-\" " + non_negative(m_lo, m_hi));
  }
  if (!hi || *hi >= 0) {
    const uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    std::optional<uint64_t> b;
    if (hi) b = static_cast<uint64_t>(*hi);
    parts.push_back(non_negative(a, b));
  }
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
  return out + ")";
}

}  // namespace loom::structured
