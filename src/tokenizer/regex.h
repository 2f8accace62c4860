// Oniguruma, the regex engine `tokenizers` compiles its Split/Replace/ByteLevel patterns
// with (same library version as the crate bundles), so `\p{L}`, `\s`, `(?i:...)` and
// lookaheads mean exactly what they mean there.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "loom/core/status.h"
#include "tokenizer/normalized_string.h"

namespace loom::tok {

class Regex {
 public:
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  static Result<std::shared_ptr<Regex>> compile(std::string_view pattern);
  // Oniguruma syntax for a literal string.
  static std::string escape(std::string_view literal);

  // Successive non-overlapping matches, the onig crate's find_iter semantics (an empty
  // match right after the previous match is skipped).
  void find_all(std::string_view s, std::vector<std::pair<uint32_t, uint32_t>>* out) const;
  // The `Pattern` view: contiguous (range, is_match) covering s.
  MatchList find_matches(std::string_view s) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  void* re_ = nullptr;  // regex_t*
  std::string pattern_;
};

// Literal-string and char-predicate patterns (no regex needed).
MatchList find_literal(std::string_view s, std::string_view literal);
template <typename Pred>
MatchList find_chars(std::string_view s, Pred pred);

}  // namespace loom::tok

#include "tokenizer/unicode.h"

namespace loom::tok {

template <typename Pred>
MatchList find_chars(std::string_view s, Pred pred) {
  MatchList out;
  if (s.empty()) {
    out.push_back({{0, 0}, false});
    return out;
  }
  uint32_t last = 0, i = 0;
  while (i < s.size()) {
    int len;
    char32_t c = uni::decode(s.data() + i, &len);
    if (pred(c)) {
      if (last < i) out.push_back({{last, i}, false});
      out.push_back({{i, i + static_cast<uint32_t>(len)}, true});
      last = i + len;
    }
    i += len;
  }
  if (last < s.size()) out.push_back({{last, static_cast<uint32_t>(s.size())}, false});
  return out;
}

}  // namespace loom::tok
