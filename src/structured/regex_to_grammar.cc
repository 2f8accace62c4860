// Regex → GBNF text, then the one GBNF parser builds the grammar: every constraint
// goes through the same parser and the same checks.
#include "loom/structured/regex_to_grammar.h"

#include "loom/structured/compile_budget.h"

#include <cstdio>

#include "structured/utf8_ranges.h"

namespace loom::structured {
namespace {

std::string codepoint_escape(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\U%08X", cp);
  return buf;
}

std::string gbnf_class(const std::vector<CodepointRange>& ranges) {
  std::string out = "[";
  for (auto [lo, hi] : ranges) {
    out += codepoint_escape(lo);
    if (hi != lo) out += "-" + codepoint_escape(hi);
  }
  return out + "]";
}

const std::vector<CodepointRange> kDigit = {{'0', '9'}};
const std::vector<CodepointRange> kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const std::vector<CodepointRange> kSpace = {{'\t', '\r'}, {' ', ' '}};

class RegexTranslator {
 public:
  RegexTranslator(std::string_view re, const RegexOptions& o) : re_(re), opts_(o) {}

  Result<std::string> translate() {
    if (!re_.empty() && re_[0] == '^') ++pos_;
    std::string out;
    LOOM_RETURN_IF_ERROR(parse_alternation(&out));
    if (pos_ < re_.size()) return error(re_[pos_] == ')' ? "unmatched ')'" : "unexpected character");
    return out;
  }

 private:
  Status error(const std::string& what) const {
    return parse_error("regex position " + std::to_string(pos_) + ": " + what);
  }
  bool eof() const { return pos_ >= re_.size(); }
  char peek() const { return eof() ? '\0' : re_[pos_]; }
  bool at_end_anchor() const {
    return peek() == '$' && (pos_ + 1 == re_.size() || re_[pos_ + 1] == ')' || re_[pos_ + 1] == '|');
  }

  Status parse_alternation(std::string* out) {
    std::vector<std::string> alts(1);
    LOOM_RETURN_IF_ERROR(parse_sequence(&alts.back()));
    while (peek() == '|') {
      ++pos_;
      alts.emplace_back();
      LOOM_RETURN_IF_ERROR(parse_sequence(&alts.back()));
    }
    *out = "(";
    for (size_t i = 0; i < alts.size(); ++i) {
      if (i) *out += " | ";
      *out += alts[i].empty() ? "\"\"" : alts[i];
    }
    *out += ")";
    return Status::Ok();
  }

  Status parse_sequence(std::string* out) {
    while (!eof() && peek() != '|' && peek() != ')') {
      if (at_end_anchor()) {
        ++pos_;
        continue;
      }
      std::string atom;
      LOOM_RETURN_IF_ERROR(parse_atom(&atom));
      LOOM_RETURN_IF_ERROR(parse_quantifier(&atom));
      if (!out->empty()) *out += " ";
      *out += atom;
    }
    return Status::Ok();
  }

  Status parse_quantifier(std::string* atom) {
    const char q = peek();
    if (q == '*' || q == '+' || q == '?') {
      ++pos_;
      *atom = "(" + *atom + ")" + q;
    } else if (q == '{') {
      size_t close = re_.find('}', pos_);
      if (close == std::string_view::npos) return error("unclosed '{'");
      std::string body(re_.substr(pos_ + 1, close - pos_ - 1));
      for (char c : body) {
        if (!(c >= '0' && c <= '9') && c != ',') return error("bad repetition {" + body + "}");
      }
      if (body.empty() || body[0] == ',') return error("repetition needs a minimum: {" + body + "}");
      pos_ = close + 1;
      *atom = "(" + *atom + "){" + body + "}";
    } else {
      return Status::Ok();
    }
    if (peek() == '?') ++pos_;  // lazy: same strings
    if (peek() == '*' || peek() == '+' || peek() == '{') return error("nested quantifier");
    return Status::Ok();
  }

  Result<uint32_t> read_utf8() {
    unsigned char c = static_cast<unsigned char>(re_[pos_]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + len > re_.size()) return error("invalid UTF-8");
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (int i = 1; i < len; ++i) v = (v << 6) | (static_cast<unsigned char>(re_[pos_ + i]) & 0x3F);
    pos_ += len;
    return v;
  }

  Result<uint32_t> read_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      char c = peek();
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return error("expected " + std::to_string(digits) + " hex digits");
      v = v * 16 + d;
      ++pos_;
    }
    return v;
  }

  // An escape after '\': a class (\d …) in *ranges, or one character in *cp.
  Status parse_escape(std::vector<CodepointRange>* ranges, uint32_t* cp, bool* is_class) {
    if (eof()) return error("trailing backslash");
    const char e = re_[pos_++];
    *is_class = false;
    auto set = [&](const std::vector<CodepointRange>& r, bool negate) {
      *ranges = normalize_ranges(r, negate);
      *is_class = true;
    };
    switch (e) {
      case 'd': set(kDigit, false); return Status::Ok();
      case 'D': set(kDigit, true); return Status::Ok();
      case 'w': set(kWord, false); return Status::Ok();
      case 'W': set(kWord, true); return Status::Ok();
      case 's': set(kSpace, false); return Status::Ok();
      case 'S': set(kSpace, true); return Status::Ok();
      case 'n': *cp = '\n'; return Status::Ok();
      case 't': *cp = '\t'; return Status::Ok();
      case 'r': *cp = '\r'; return Status::Ok();
      case 'f': *cp = '\f'; return Status::Ok();
      case 'v': *cp = '\v'; return Status::Ok();
      case '0': *cp = 0; return Status::Ok();
      case 'x': {
        LOOM_ASSIGN_OR_RETURN(*cp, read_hex(2));
        return Status::Ok();
      }
      case 'u': {
        LOOM_ASSIGN_OR_RETURN(*cp, read_hex(4));
        return Status::Ok();
      }
      case 'b': case 'B': return error("word boundaries (\\b, \\B) are not supported");
      default:
        if ((e >= '1' && e <= '9')) return error("backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return error(std::string("unknown escape \\") + e);
        *cp = static_cast<unsigned char>(e);
        return Status::Ok();
    }
  }

  std::vector<CodepointRange> json_safe(std::vector<CodepointRange> r) const {
    if (!opts_.json_string_safe) return r;
    // Intersect with the complement of '"', '\' and C0 controls.
    auto bad = normalize_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
    std::vector<CodepointRange> out;
    for (auto [a, b] : r) {
      for (auto [c, d] : bad) {
        uint32_t lo = std::max(a, c), hi = std::min(b, d);
        if (lo <= hi) out.emplace_back(lo, hi);
      }
    }
    return normalize_ranges(out, false);
  }

  Status class_atom(std::vector<CodepointRange> ranges, std::string* out) {
    ranges = json_safe(normalize_ranges(std::move(ranges), false));
    if (ranges.empty()) return error("character class matches nothing");
    *out = gbnf_class(ranges);
    return Status::Ok();
  }

  Status char_atom(uint32_t cp, std::string* out) {
    if (opts_.json_string_safe && (cp < 0x20 || cp == '"' || cp == '\\')) {
      return error("a pattern matching '\"', '\\' or a control character needs JSON escapes: not supported");
    }
    *out = gbnf_class({{cp, cp}});
    return Status::Ok();
  }

  Status parse_atom(std::string* out) {
    const char c = peek();
    if (c == '(') {
      ++pos_;
      if (++depth_ > 200) return error("groups nest deeper than 200");
      if (peek() == '?') {
        if (pos_ + 1 < re_.size() && re_[pos_ + 1] == ':') {
          pos_ += 2;
        } else {
          return error("group flags, lookaround and named groups ((?...)) are not supported");
        }
      }
      LOOM_RETURN_IF_ERROR(parse_alternation(out));
      if (peek() != ')') return error("unclosed '('");
      ++pos_;
      --depth_;
      return Status::Ok();
    }
    if (c == '[') return parse_class(out);
    if (c == '.') {
      ++pos_;
      return class_atom(normalize_ranges({{'\n', '\n'}}, true), out);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return error(std::string("nothing to repeat before '") + c + "'");
    if (c == '^') return error("'^' is only supported at the start");
    if (c == '$') return error("'$' is only supported at the end");
    if (c == '\\') {
      ++pos_;
      std::vector<CodepointRange> ranges;
      uint32_t cp = 0;
      bool is_class;
      LOOM_RETURN_IF_ERROR(parse_escape(&ranges, &cp, &is_class));
      return is_class ? class_atom(std::move(ranges), out) : char_atom(cp, out);
    }
    LOOM_ASSIGN_OR_RETURN(uint32_t cp, read_utf8());
    return char_atom(cp, out);
  }

  Status parse_class(std::string* out) {
    const size_t start = pos_;
    ++pos_;
    bool negate = false;
    if (peek() == '^') {
      negate = true;
      ++pos_;
    }
    std::vector<CodepointRange> ranges;
    bool first = true;
    while (!eof() && (peek() != ']' || first)) {
      first = false;
      uint32_t lo;
      if (peek() == '\\') {
        ++pos_;
        std::vector<CodepointRange> sub;
        bool is_class;
        LOOM_RETURN_IF_ERROR(parse_escape(&sub, &lo, &is_class));
        if (is_class) {
          ranges.insert(ranges.end(), sub.begin(), sub.end());
          continue;
        }
      } else {
        LOOM_ASSIGN_OR_RETURN(lo, read_utf8());
      }
      uint32_t hi = lo;
      if (peek() == '-' && pos_ + 1 < re_.size() && re_[pos_ + 1] != ']') {
        ++pos_;
        if (peek() == '\\') {
          ++pos_;
          std::vector<CodepointRange> sub;
          bool is_class;
          LOOM_RETURN_IF_ERROR(parse_escape(&sub, &hi, &is_class));
          if (is_class) return error("a class escape cannot end a range");
        } else {
          LOOM_ASSIGN_OR_RETURN(hi, read_utf8());
        }
        if (hi < lo) return error("character range is reversed");
      }
      ranges.emplace_back(lo, hi);
    }
    if (eof()) {
      pos_ = start;
      return error("unclosed '['");
    }
    ++pos_;
    return class_atom(normalize_ranges(std::move(ranges), negate), out);
  }

  std::string_view re_;
  RegexOptions opts_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);  // UTF-8 passes through: the parser decodes it
    }
  }
  return out + "\"";
}

Result<std::string> regex_to_gbnf(std::string_view regex, const RegexOptions& options) {
  return RegexTranslator(regex, options).translate();
}

Result<Grammar> regex_to_grammar(std::string_view regex) {
  LOOM_ASSIGN_OR_RETURN(std::string expr, regex_to_gbnf(regex));
  return parse_gbnf("root ::= " + expr + "\n");
}

Result<Grammar> choices_to_grammar(const std::vector<std::string>& choices) {
  if (choices.empty()) return invalid_argument("choice: the list is empty");
  std::string text = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].empty()) return invalid_argument("choice " + std::to_string(i) + " is empty");
    if (i) text += " | ";
    text += gbnf_literal(choices[i]);
    LOOM_RETURN_IF_ERROR(check_compile_budget());
  }
  return parse_gbnf(text + "\n");
}

}  // namespace loom::structured
