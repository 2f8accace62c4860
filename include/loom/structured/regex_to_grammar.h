// Regular expressions and choice lists as grammars. The regex subset: literals,
// `.` (any character but newline), [classes] with ranges and negation, escapes
// (\d \w \s \D \W \S \n \t \r \f \v \xHH \uHHHH, escaped punctuation), groups (( )
// and (?: )), alternation, `*` `+` `?` `{m}` `{m,}` `{m,n}` (lazy forms match the
// same strings). The whole output must match: ^ and $ are implied (and accepted at
// the ends); lookaround, backreferences and \b are refused by name.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/structured/grammar.h"

namespace loom::structured {

struct RegexOptions {
  // For JSON Schema's `pattern`: the text goes between JSON quotes unescaped, so
  // classes drop '"', '\' and control characters and literals of them are refused.
  bool json_string_safe = false;
};

// The regex as one GBNF expression (for embedding in a bigger grammar).
Result<std::string> regex_to_gbnf(std::string_view regex, const RegexOptions& options = {});
Result<Grammar> regex_to_grammar(std::string_view regex);

// Exactly one of `choices` (none empty).
Result<Grammar> choices_to_grammar(const std::vector<std::string>& choices);

// A GBNF string literal matching exactly `text`.
std::string gbnf_literal(std::string_view text);

}  // namespace loom::structured
