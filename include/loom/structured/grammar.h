// The grammar IR every constraint compiles to: rules of alternatives of element
// sequences, where an element is one byte drawn from a set or a reference to a rule.
// Text is UTF-8 bytes all the way down: a character class over code points becomes
// alternatives of byte sequences when it is parsed, so the automaton only ever sees
// bytes (and the vocabulary's tokens, which are byte strings, need no decoding).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/status.h"

namespace loom::structured {

// 256 bits: the bytes one element accepts.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  bool operator==(const ByteSet&) const = default;
};

struct Element {
  enum class Kind : uint8_t { kByte, kRule };
  Kind kind = Kind::kByte;
  ByteSet bytes;     // kByte
  int32_t rule = -1; // kRule
};

struct Alternative {
  std::vector<Element> elements;  // empty: matches the empty string
};

struct Rule {
  std::string name;
  std::vector<Alternative> alternatives;
};

struct Grammar {
  std::vector<Rule> rules;
  int32_t root = -1;
};

// llama.cpp's GBNF (grammars/README.md): `name ::= body` rules, `|` alternation,
// ( ) grouping, `*` `+` `?` `{m}` `{m,}` `{m,n}`, "literals" and [classes] (negated
// with ^, ranges, \n \t \r \\ \xHH \uHHHH \UHHHHHHHH escapes), `.` for any character,
// `#` comments. The start rule is `root` (or `root_rule` when given). Errors name the
// line and column, undefined rules, and left recursion (which the automaton cannot run).
Result<Grammar> parse_gbnf(std::string_view text, std::string_view root_rule = "root");

// Checks a built grammar: every reference defined, no left recursion. parse_gbnf
// calls it; builders that assemble a Grammar by hand should too.
Status validate_grammar(const Grammar& g);

}  // namespace loom::structured
