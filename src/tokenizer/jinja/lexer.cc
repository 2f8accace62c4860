#include "loom/tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "loom/tokenizer/jinja/utf8.h"

namespace loom::jinja {

SourceMap::SourceMap(const std::string& source) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\n') line_starts_.push_back(i + 1);
  }
}

std::pair<int, int> SourceMap::line_column(size_t offset) const {
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const size_t line = static_cast<size_t>(it - line_starts_.begin());  // 1-based
  const size_t start = line_starts_[line - 1];
  return {static_cast<int>(line), static_cast<int>(offset - start + 1)};
}

std::string SourceMap::describe(size_t offset) const {
  auto [line, column] = line_column(offset);
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

std::string normalize_template_source(const std::string& source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

namespace {

// Python's \s for the whitespace jinja2's regexes skip; multi-byte Unicode
// spaces are rare enough in templates to ignore here.
bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  Lexer(const std::string& src, const LexerOptions& options) : src_(src), opt_(options), map_(src) {}

  Result<std::vector<Token>> run() {
    Status s = lex_root();
    if (!s.ok()) return s;
    tokens_.push_back(Token{TokenType::kEof, "", src_.size()});
    return std::move(tokens_);
  }

 private:
  Status error(size_t offset, const std::string& message) const {
    return parse_error("template syntax error at " + map_.describe(offset) + ": " + message);
  }

  bool starts_with(size_t pos, const char* s) const {
    const size_t n = std::strlen(s);
    return pos + n <= src_.size() && src_.compare(pos, n, s) == 0;
  }

  // Jinja's lstrip_blocks / '-' handling of the text before a tag.
  void emit_text(std::string text, size_t text_offset, char sign, bool is_variable) {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0 && is_ws(text[end - 1])) --end;
      text.resize(end);
    } else if (sign != '+' && opt_.lstrip_blocks && !is_variable) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size()) {
        bool all_ws = true;
        for (size_t i = l_pos; i < text.size(); ++i) {
          if (!is_ws(text[i])) {
            all_ws = false;
            break;
          }
        }
        if (all_ws) text.resize(l_pos);
      }
    }
    if (!text.empty()) tokens_.push_back(Token{TokenType::kData, std::move(text), text_offset});
  }

  // Consumes the end of a block tag (`%}`, `-%}` + whitespace, `+%}`), applying trim_blocks.
  size_t consume_block_end(size_t pos, char sign) {
    if (sign == '-') {
      while (pos < src_.size() && is_ws(src_[pos])) ++pos;
    } else if (sign != '+' && opt_.trim_blocks && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    line_starting_ = pos > 0 && src_[pos - 1] == '\n';
    return pos;
  }

  Status lex_root() {
    size_t pos = 0;
    line_starting_ = true;
    while (pos < src_.size()) {
      size_t tag = src_.find('{', pos);
      while (tag != std::string::npos && tag + 1 < src_.size() && src_[tag + 1] != '%' && src_[tag + 1] != '{' &&
             src_[tag + 1] != '#') {
        tag = src_.find('{', tag + 1);
      }
      if (tag == std::string::npos || tag + 1 >= src_.size()) {
        tokens_.push_back(Token{TokenType::kData, src_.substr(pos), pos});
        return Status::Ok();
      }
      const char kind = src_[tag + 1];
      size_t after = tag + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      std::string text = src_.substr(pos, tag - pos);

      if (kind == '#') {
        emit_text(std::move(text), pos, sign, false);
        LOOM_ASSIGN_OR_RETURN(pos, lex_comment(tag, after));
        continue;
      }
      if (kind == '%') {
        size_t raw_end = 0;
        if (is_raw_open(after, &raw_end)) {
          emit_text(std::move(text), pos, sign, false);
          LOOM_ASSIGN_OR_RETURN(pos, lex_raw(tag, raw_end));
          continue;
        }
      }
      emit_text(std::move(text), pos, sign, kind == '{');
      LOOM_ASSIGN_OR_RETURN(pos, lex_tag(tag, after, kind == '%'));
    }
    return Status::Ok();
  }

  Result<size_t> lex_comment(size_t tag, size_t body) {
    const size_t end = src_.find("#}", body);
    if (end == std::string::npos) return error(tag, "missing end of comment tag '#}'");
    char sign = 0;
    if (end > body && (src_[end - 1] == '-' || src_[end - 1] == '+')) sign = src_[end - 1];
    return consume_block_end(end + 2, sign);
  }

  // `{% raw %}` (with optional -/+ and spaces).
  bool is_raw_open(size_t pos, size_t* end) const {
    while (pos < src_.size() && is_ws(src_[pos])) ++pos;
    if (!starts_with(pos, "raw")) return false;
    pos += 3;
    if (pos < src_.size() && is_name_char(src_[pos])) return false;
    while (pos < src_.size() && is_ws(src_[pos])) ++pos;
    if (starts_with(pos, "-%}")) {
      pos += 3;
      while (pos < src_.size() && is_ws(src_[pos])) ++pos;
    } else if (starts_with(pos, "%}")) {
      pos += 2;
    } else {
      return false;
    }
    *end = pos;
    return true;
  }

  Result<size_t> lex_raw(size_t tag, size_t body) {
    size_t search = body;
    while (true) {
      const size_t open = src_.find("{%", search);
      if (open == std::string::npos) return error(tag, "missing end of raw directive '{% endraw %}'");
      size_t p = open + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      while (p < src_.size() && is_ws(src_[p])) ++p;
      if (!starts_with(p, "endraw")) {
        search = open + 2;
        continue;
      }
      p += 6;
      while (p < src_.size() && is_ws(src_[p])) ++p;
      char end_sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) end_sign = src_[p++];
      if (!starts_with(p, "%}")) return error(open, "malformed '{% endraw %}'");
      line_starting_ = body > 0 && src_[body - 1] == '\n';
      emit_text(src_.substr(body, open - body), body, sign, false);
      return consume_block_end(p + 2, end_sign);
    }
  }

  Result<size_t> lex_tag(size_t tag, size_t pos, bool is_block) {
    tokens_.push_back(Token{is_block ? TokenType::kBlockBegin : TokenType::kVariableBegin, "", tag});
    std::vector<char> balance;
    while (true) {
      while (pos < src_.size() && is_ws(src_[pos])) ++pos;
      if (pos >= src_.size()) {
        return error(tag, std::string("unexpected end of template, expected '") + (is_block ? "%}" : "}}") +
                              "' to close the tag opened here");
      }
      if (balance.empty()) {
        const char* close = is_block ? "%}" : "}}";
        char sign = 0;
        size_t p = pos;
        if (src_[p] == '-' || src_[p] == '+') sign = src_[p++];
        if (starts_with(p, close) && !(sign == '+' && !is_block)) {
          tokens_.push_back(Token{is_block ? TokenType::kBlockEnd : TokenType::kVariableEnd, "", pos});
          size_t next = p + 2;
          if (is_block) return consume_block_end(next, sign);
          if (sign == '-') {
            while (next < src_.size() && is_ws(src_[next])) ++next;
          }
          line_starting_ = next > 0 && src_[next - 1] == '\n';
          return next;
        }
      }
      const char c = src_[pos];
      if (is_digit(c)) {
        LOOM_ASSIGN_OR_RETURN(pos, lex_number(pos));
      } else if (is_name_start(c)) {
        size_t end = pos;
        while (end < src_.size() && is_name_char(src_[end])) ++end;
        tokens_.push_back(Token{TokenType::kName, src_.substr(pos, end - pos), pos});
        pos = end;
      } else if (c == '\'' || c == '"') {
        LOOM_ASSIGN_OR_RETURN(pos, lex_string(pos));
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                     "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
        const char* matched = nullptr;
        for (const char* op : kOps) {
          if (starts_with(pos, op)) {
            matched = op;
            break;
          }
        }
        if (!matched) {
          std::string shown(1, c);
          if (static_cast<unsigned char>(c) >= 0x80) {
            size_t n = 1;
            while (pos + n < src_.size() && (static_cast<unsigned char>(src_[pos + n]) & 0xc0) == 0x80) ++n;
            shown = src_.substr(pos, n);
          }
          return error(pos, "unexpected character '" + shown + "' inside a tag");
        }
        const std::string op(matched);
        if (op == "(" || op == "[" || op == "{") {
          balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty()) return error(pos, "unexpected '" + op + "'");
          if (balance.back() != op[0]) {
            return error(pos, "unexpected '" + op + "', expected '" + std::string(1, balance.back()) + "'");
          }
          balance.pop_back();
        }
        tokens_.push_back(Token{TokenType::kOperator, op, pos});
        pos += op.size();
      }
    }
  }

  // Scans digits with Python's optional single underscores between them.
  size_t scan_digits(size_t pos, bool (*ok)(char)) const {
    size_t p = pos;
    while (p < src_.size()) {
      if (ok(src_[p])) {
        ++p;
      } else if (src_[p] == '_' && p > pos && p + 1 < src_.size() && ok(src_[p + 1])) {
        ++p;
      } else {
        break;
      }
    }
    return p;
  }

  Result<size_t> lex_number(size_t pos) {
    auto dec = [](char ch) { return ch >= '0' && ch <= '9'; };
    if (src_[pos] == '0' && pos + 1 < src_.size()) {
      const char base_char = static_cast<char>(src_[pos + 1] | 0x20);
      int base = base_char == 'x' ? 16 : base_char == 'o' ? 8 : base_char == 'b' ? 2 : 0;
      if (base) {
        size_t p = pos + 2;
        int64_t v = 0;
        size_t digits = 0;
        while (p < src_.size()) {
          char ch = src_[p];
          if (ch == '_') {
            ++p;
            continue;
          }
          int d = -1;
          if (ch >= '0' && ch <= '9') d = ch - '0';
          else if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f') d = (ch | 0x20) - 'a' + 10;
          if (d < 0 || d >= base) break;
          v = v * base + d;
          ++digits;
          ++p;
        }
        if (digits == 0) return error(pos, "malformed number literal");
        Token t{TokenType::kInteger, src_.substr(pos, p - pos), pos};
        t.int_value = v;
        tokens_.push_back(std::move(t));
        return p;
      }
    }
    size_t p = scan_digits(pos, dec);
    bool is_float = false;
    const bool leading_zero = src_[pos] == '0' && src_.find_first_not_of("0_", pos) < p;
    if (p + 1 < src_.size() && src_[p] == '.' && dec(src_[p + 1])) {
      is_float = true;
      p = scan_digits(p + 1, dec);
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && dec(src_[q])) {
        is_float = true;
        p = scan_digits(q, dec);
      }
    }
    if (leading_zero && !is_float) return error(pos, "leading zeros in decimal integer literals are not permitted");
    std::string literal;
    for (size_t i = pos; i < p; ++i) {
      if (src_[i] != '_') literal.push_back(src_[i]);
    }
    Token t{is_float ? TokenType::kFloat : TokenType::kInteger, src_.substr(pos, p - pos), pos};
    if (is_float) {
      t.float_value = std::strtod(literal.c_str(), nullptr);
    } else {
      errno = 0;
      t.int_value = std::strtoll(literal.c_str(), nullptr, 10);
      if (errno == ERANGE) return error(pos, "integer literal " + literal + " does not fit in 64 bits");
    }
    tokens_.push_back(std::move(t));
    return p;
  }

  // Python "unicode-escape" decoding of a string literal's body.
  Result<size_t> lex_string(size_t pos) {
    const char quote = src_[pos];
    std::string value;
    size_t p = pos + 1;
    while (true) {
      if (p >= src_.size()) return error(pos, "unterminated string literal");
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) return error(pos, "unterminated string literal");
      const char e = src_[p + 1];
      p += 2;
      auto hex = [&](int n) -> Result<char32_t> {
        if (p + static_cast<size_t>(n) > src_.size()) return error(p - 2, "truncated \\x/\\u escape");
        uint32_t v = 0;
        for (int k = 0; k < n; ++k) {
          const char h = src_[p + static_cast<size_t>(k)];
          int d;
          if (h >= '0' && h <= '9') d = h - '0';
          else if ((h | 0x20) >= 'a' && (h | 0x20) <= 'f') d = (h | 0x20) - 'a' + 10;
          else return error(p - 2, "truncated \\x/\\u escape");
          v = v * 16 + static_cast<uint32_t>(d);
        }
        p += static_cast<size_t>(n);
        if (v > 0x10ffff) return error(p - 2, "illegal Unicode character in escape");
        return static_cast<char32_t>(v);
      };
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': value.push_back('\\'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case 'a': value.push_back('\a'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'n': value.push_back('\n'); break;
        case 'r': value.push_back('\r'); break;
        case 't': value.push_back('\t'); break;
        case 'v': value.push_back('\v'); break;
        case 'x': { LOOM_ASSIGN_OR_RETURN(char32_t cp, hex(2)); utf8::append(value, cp); break; }
        case 'u': { LOOM_ASSIGN_OR_RETURN(char32_t cp, hex(4)); utf8::append(value, cp); break; }
        case 'U': { LOOM_ASSIGN_OR_RETURN(char32_t cp, hex(8)); utf8::append(value, cp); break; }
        case 'N': return error(p - 2, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k) {
              v = v * 8 + static_cast<uint32_t>(src_[p++] - '0');
            }
            utf8::append(value, v);
          } else {
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    tokens_.push_back(Token{TokenType::kString, std::move(value), pos});
    return p + 1;
  }

  const std::string& src_;
  LexerOptions opt_;
  SourceMap map_;
  std::vector<Token> tokens_;
  bool line_starting_ = true;
};

}  // namespace

Result<std::vector<Token>> tokenize(const std::string& source, const LexerOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace loom::jinja
