// GBNF text → Grammar. Newlines are whitespace everywhere (a rule ends where the next
// `name ::=` starts), which accepts every grammar llama.cpp accepts and a few more.
#include <algorithm>
#include <map>

#include "loom/structured/compile_budget.h"
#include "loom/structured/grammar.h"
#include "structured/utf8_ranges.h"

namespace loom::structured {
namespace {

constexpr int kMaxRepetition = 10000;
// Groups nest by recursion: deeper than this is refused rather than overflowing the stack.
constexpr int kMaxNesting = 200;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : text_(text) {}

  Result<Grammar> parse(std::string_view root_rule) {
    skip_space();
    while (!eof()) {
      const size_t at = pos_;
      std::string name = parse_name();
      if (name.empty()) return error_at(at, "expected a rule name");
      skip_space();
      if (text_.compare(pos_, 3, "::=") != 0) return error_at(pos_, "expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      const int32_t id = rule_id(name, at);
      if (defined_[id]) return error_at(at, "rule '" + name + "' is defined twice");
      defined_[id] = true;
      LOOM_RETURN_IF_ERROR(check_compile_budget());
      std::vector<Alternative> alts;
      LOOM_RETURN_IF_ERROR(parse_alternates(name, false, &alts));
      g_.rules[id].alternatives = std::move(alts);
      skip_space();
    }
    for (size_t i = 0; i < g_.rules.size(); ++i) {
      if (!defined_[i]) return error_at(first_use_[i], "rule '" + g_.rules[i].name + "' is used but never defined");
    }
    auto root = ids_.find(std::string(root_rule));
    if (root == ids_.end()) return parse_error("grammar: no '" + std::string(root_rule) + "' rule (the start rule)");
    g_.root = root->second;
    LOOM_RETURN_IF_ERROR(validate_grammar(g_));
    return std::move(g_);
  }

 private:
  bool eof() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  Status error_at(size_t at, const std::string& what) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return parse_error("grammar line " + std::to_string(line) + " column " + std::to_string(col) + ": " + what);
  }

  void skip_space() {
    while (!eof()) {
      char c = peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!eof() && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    size_t start = pos_;
    while (!eof() && is_name_char(peek())) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  bool at_rule_start() const {
    size_t p = pos_;
    while (p < text_.size() && is_name_char(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
    return text_.compare(p, 3, "::=") == 0;
  }

  int32_t rule_id(const std::string& name, size_t at) {
    auto [it, inserted] = ids_.emplace(name, static_cast<int32_t>(g_.rules.size()));
    if (inserted) {
      g_.rules.push_back(Rule{name, {}});
      defined_.push_back(false);
      first_use_.push_back(at);
    }
    return it->second;
  }

  int32_t new_helper_rule(const std::string& parent, std::vector<Alternative> alts) {
    // '~' cannot appear in a written rule name, so helpers never collide with one.
    std::string name = parent + "~" + std::to_string(++helper_count_);
    int32_t id = rule_id(name, pos_);
    defined_[id] = true;
    g_.rules[id].alternatives = std::move(alts);
    return id;
  }

  static Element ref(int32_t rule) {
    Element e;
    e.kind = Element::Kind::kRule;
    e.rule = rule;
    return e;
  }

  Status parse_alternates(const std::string& rule, bool nested, std::vector<Alternative>* alts) {
    Alternative first;
    LOOM_RETURN_IF_ERROR(parse_sequence(rule, nested, &first));
    alts->push_back(std::move(first));
    while (peek() == '|') {
      ++pos_;
      LOOM_RETURN_IF_ERROR(check_compile_budget());
      Alternative next;
      LOOM_RETURN_IF_ERROR(parse_sequence(rule, nested, &next));
      alts->push_back(std::move(next));
    }
    return Status::Ok();
  }

  Status parse_sequence(const std::string& rule, bool nested, Alternative* out) {
    for (;;) {
      skip_space();
      if (eof() || peek() == '|' || (nested && peek() == ')')) return Status::Ok();
      if (!nested && at_rule_start()) return Status::Ok();
      std::vector<Element> primary;
      LOOM_RETURN_IF_ERROR(parse_primary(rule, &primary));
      LOOM_RETURN_IF_ERROR(charge_compile_elements(primary.size()));
      LOOM_RETURN_IF_ERROR(parse_quantifier(rule, std::move(primary), &out->elements));
    }
  }

  Status parse_primary(const std::string& rule, std::vector<Element>* out) {
    const size_t at = pos_;
    const char c = peek();
    if (c == '"') {
      ++pos_;
      while (!eof() && peek() != '"') {
        uint32_t cp;
        LOOM_RETURN_IF_ERROR(parse_char(&cp));
        std::string bytes;
        append_utf8(bytes, cp);
        for (unsigned char b : bytes) {
          Element e;
          e.bytes.add(b);
          out->push_back(e);
        }
      }
      if (eof()) return error_at(at, "unterminated string literal");
      ++pos_;
      return Status::Ok();
    }
    if (c == '[') {
      ++pos_;
      bool negate = false;
      if (peek() == '^') {
        negate = true;
        ++pos_;
      }
      std::vector<CodepointRange> ranges;
      while (!eof() && peek() != ']') {
        uint32_t lo, hi;
        LOOM_RETURN_IF_ERROR(parse_char(&lo));
        hi = lo;
        if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
          ++pos_;
          LOOM_RETURN_IF_ERROR(parse_char(&hi));
          if (hi < lo) return error_at(at, "character range is reversed");
        }
        ranges.emplace_back(lo, hi);
      }
      if (eof()) return error_at(at, "unterminated character class");
      ++pos_;
      auto set = normalize_ranges(std::move(ranges), negate);
      if (set.empty()) return error_at(at, "character class matches nothing");
      out->push_back(class_element(rule, set));
      return Status::Ok();
    }
    if (c == '.') {
      ++pos_;
      out->push_back(class_element(rule, normalize_ranges({}, true)));
      return Status::Ok();
    }
    if (c == '(') {
      ++pos_;
      if (++depth_ > kMaxNesting) return error_at(at, "groups nest deeper than " + std::to_string(kMaxNesting));
      std::vector<Alternative> alts;
      LOOM_RETURN_IF_ERROR(parse_alternates(rule, true, &alts));
      --depth_;
      skip_space();
      if (peek() != ')') return error_at(at, "unclosed '('");
      ++pos_;
      out->push_back(ref(new_helper_rule(rule, std::move(alts))));
      return Status::Ok();
    }
    if (c == '<') return error_at(at, "token references (<...>) are not supported; write the text instead");
    if (is_name_char(c)) {
      std::string name = parse_name();
      out->push_back(ref(rule_id(name, at)));
      return Status::Ok();
    }
    return error_at(at, std::string("unexpected character '") + c + "'");
  }

  // A class as one byte element when every member is one byte, else a helper rule
  // with one alternative per UTF-8 byte-range sequence.
  Element class_element(const std::string& rule, const std::vector<CodepointRange>& set) {
    auto seqs = utf8_sequences(set);
    Element single;
    std::vector<Alternative> alts;
    bool any_single = false;
    for (const auto& seq : seqs) {
      if (seq.size() == 1) {
        single.bytes.add_range(seq[0].first, seq[0].second);
        any_single = true;
        continue;
      }
      Alternative a;
      for (auto [lo, hi] : seq) {
        Element e;
        e.bytes.add_range(lo, hi);
        a.elements.push_back(e);
      }
      alts.push_back(std::move(a));
    }
    if (alts.empty()) return single;
    if (any_single) alts.insert(alts.begin(), Alternative{{single}});
    return ref(new_helper_rule(rule, std::move(alts)));
  }

  Status parse_quantifier(const std::string& rule, std::vector<Element> primary, std::vector<Element>* out) {
    const char q = peek();
    if (q != '*' && q != '+' && q != '?' && q != '{') {
      out->insert(out->end(), primary.begin(), primary.end());
      return Status::Ok();
    }
    const size_t at = pos_;
    ++pos_;
    Element item;
    if (primary.size() == 1) {
      item = primary[0];
    } else {
      item = ref(new_helper_rule(rule, {Alternative{std::move(primary)}}));
    }
    int min = 0, max = -1;  // -1: unbounded
    if (q == '+') min = 1;
    if (q == '?') max = 1;
    if (q == '{') {
      skip_space();
      if (!parse_int(&min)) return error_at(at, "expected a number after '{'");
      skip_space();
      max = min;
      if (peek() == ',') {
        ++pos_;
        skip_space();
        max = -1;
        if (peek() != '}' && !parse_int(&max)) return error_at(at, "expected a number or '}' after ','");
        skip_space();
      }
      if (peek() != '}') return error_at(at, "expected '}'");
      ++pos_;
      if (min > kMaxRepetition || max > kMaxRepetition) return error_at(at, "repetition count above 10000");
      if (max >= 0 && max < min) return error_at(at, "repetition {m,n} with n < m");
    }
    LOOM_RETURN_IF_ERROR(charge_compile_elements(static_cast<size_t>(std::max(min, max))));
    LOOM_RETURN_IF_ERROR(check_compile_budget());
    for (int i = 0; i < min; ++i) out->push_back(item);
    if (max < 0) {
      const int32_t star = new_helper_rule(rule, {});
      g_.rules[star].alternatives = {Alternative{{item, ref(star)}}, Alternative{}};
      out->push_back(ref(star));
    } else if (max > min) {
      int32_t tail = new_helper_rule(rule, {Alternative{{item}}, Alternative{}});
      for (int i = min + 1; i < max; ++i) tail = new_helper_rule(rule, {Alternative{{item, ref(tail)}}, Alternative{}});
      out->push_back(ref(tail));
    }
    return Status::Ok();
  }

  bool parse_int(int* v) {
    size_t start = pos_;
    long long n = 0;
    while (!eof() && peek() >= '0' && peek() <= '9' && n <= kMaxRepetition * 10LL) n = n * 10 + (text_[pos_++] - '0');
    *v = static_cast<int>(std::min<long long>(n, kMaxRepetition + 1));
    return pos_ > start;
  }

  Status parse_hex(int digits, uint32_t* cp) {
    const size_t at = pos_;
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      char c = peek();
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return error_at(at, "expected " + std::to_string(digits) + " hex digits");
      v = v * 16 + d;
      ++pos_;
    }
    if (v > 0x10FFFF) return error_at(at, "code point above U+10FFFF");
    *cp = v;
    return Status::Ok();
  }

  // One character of a literal or class (UTF-8 decoded), escapes resolved.
  Status parse_char(uint32_t* cp) {
    const size_t at = pos_;
    unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c == '\\') {
      ++pos_;
      if (eof()) return error_at(at, "escape at end of grammar");
      char e = text_[pos_++];
      switch (e) {
        case 'n': *cp = '\n'; return Status::Ok();
        case 'r': *cp = '\r'; return Status::Ok();
        case 't': *cp = '\t'; return Status::Ok();
        case '0': *cp = 0; return Status::Ok();
        case 'x': return parse_hex(2, cp);
        case 'u': return parse_hex(4, cp);
        case 'U': return parse_hex(8, cp);
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': case '.':
          *cp = static_cast<unsigned char>(e);
          return Status::Ok();
        default:
          return error_at(at, std::string("unknown escape '\\") + e + "'");
      }
    }
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + len > text_.size()) return error_at(at, "invalid UTF-8 in grammar");
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      unsigned char cc = static_cast<unsigned char>(text_[pos_ + i]);
      if ((cc & 0xC0) != 0x80) return error_at(at, "invalid UTF-8 in grammar");
      v = (v << 6) | (cc & 0x3F);
    }
    pos_ += len;
    *cp = v;
    return Status::Ok();
  }

  std::string_view text_;
  size_t pos_ = 0;
  Grammar g_;
  std::map<std::string, int32_t> ids_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
  int helper_count_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<Grammar> parse_gbnf(std::string_view text, std::string_view root_rule) {
  return GbnfParser(text).parse(root_rule);
}

Status validate_grammar(const Grammar& g) {
  const size_t n = g.rules.size();
  if (g.root < 0 || static_cast<size_t>(g.root) >= n) return invalid_argument("grammar: no start rule");
  for (const Rule& r : g.rules) {
    for (const Alternative& a : r.alternatives) {
      for (const Element& e : a.elements) {
        if (e.kind == Element::Kind::kRule && (e.rule < 0 || static_cast<size_t>(e.rule) >= n)) {
          return invalid_argument("grammar: rule '" + r.name + "' refers to an undefined rule");
        }
      }
    }
  }
  // Nullable rules by a worklist (a fixpoint of passes over the rules is quadratic on
  // the long chains schema objects make), then the "starts with" graph must be acyclic.
  std::vector<bool> nullable(n, false);
  std::vector<int32_t> alt_rule;            // per alternative: its rule
  std::vector<int32_t> pending;             // per alternative: rule elements not yet nullable
  std::vector<std::vector<int32_t>> users(n);  // per rule: the alternatives naming it, once per use
  std::vector<int32_t> work;
  for (size_t i = 0; i < n; ++i) {
    for (const Alternative& a : g.rules[i].alternatives) {
      const bool has_byte = std::any_of(a.elements.begin(), a.elements.end(),
                                        [](const Element& e) { return e.kind == Element::Kind::kByte; });
      if (has_byte) continue;  // never nullable
      const int32_t alt = static_cast<int32_t>(pending.size());
      alt_rule.push_back(static_cast<int32_t>(i));
      pending.push_back(static_cast<int32_t>(a.elements.size()));
      for (const Element& e : a.elements) users[e.rule].push_back(alt);
      if (a.elements.empty() && !nullable[i]) {
        nullable[i] = true;
        work.push_back(static_cast<int32_t>(i));
      }
    }
  }
  while (!work.empty()) {
    const int32_t r = work.back();
    work.pop_back();
    for (int32_t alt : users[r]) {
      if (--pending[alt] == 0 && !nullable[alt_rule[alt]]) {
        nullable[alt_rule[alt]] = true;
        work.push_back(alt_rule[alt]);
      }
    }
  }
  std::vector<std::vector<int32_t>> starts(n);
  for (size_t i = 0; i < n; ++i) {
    for (const Alternative& a : g.rules[i].alternatives) {
      for (const Element& e : a.elements) {
        if (e.kind == Element::Kind::kByte) break;
        starts[i].push_back(e.rule);
        if (!nullable[e.rule]) break;
      }
    }
  }
  std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
  std::string cycle_rule;
  auto visit = [&](auto&& self, int32_t r) -> bool {
    color[r] = 1;
    for (int32_t s : starts[r]) {
      if (color[s] == 1) {
        cycle_rule = g.rules[s].name;
        return false;
      }
      if (color[s] == 0 && !self(self, s)) return false;
    }
    color[r] = 2;
    return true;
  };
  for (size_t i = 0; i < n; ++i) {
    if (color[i] == 0 && !visit(visit, static_cast<int32_t>(i))) {
      return invalid_argument("grammar: rule '" + cycle_rule +
                              "' is left-recursive (it can start with itself); rewrite it with repetition");
    }
  }
  return Status::Ok();
}

}  // namespace loom::structured
