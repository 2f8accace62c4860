// Splits a template into text and tag tokens the way jinja2's lexer does,
// including its whitespace control: `{%-`/`-%}` strip, `{%+`/`+%}` keep,
// trim_blocks (drop the newline after a block tag or comment) and lstrip_blocks
// (drop the indentation before one), and the single trailing newline jinja2
// removes unless keep_trailing_newline is set.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/status.h"

namespace loom::jinja {

enum class TokenType : uint8_t {
  kData,           // literal template text
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenType type;
  std::string text;  // data, name, decoded string literal or operator
  size_t offset = 0; // byte offset in the normalized source
  int64_t int_value = 0;
  double float_value = 0.0;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Maps byte offsets of the normalized source back to 1-based line/column.
class SourceMap {
 public:
  explicit SourceMap(const std::string& source);
  std::pair<int, int> line_column(size_t offset) const;
  // "line 3, column 7"
  std::string describe(size_t offset) const;

 private:
  std::vector<size_t> line_starts_;
};

// Newlines (\r\n, \r) become \n and, unless keep_trailing_newline, one
// trailing newline is dropped — as jinja2 does before lexing.
std::string normalize_template_source(const std::string& source, bool keep_trailing_newline);

// `source` must already be normalized. Errors name the line and column.
Result<std::vector<Token>> tokenize(const std::string& source, const LexerOptions& options);

}  // namespace loom::jinja
