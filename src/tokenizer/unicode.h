// Unicode facts the tokenizer needs, each defined the way the Hugging Face `tokenizers`
// crates define it (see gen_unicode_tables.py for why the Unicode versions differ):
// normalization data of Unicode 9.0, BERT/Punctuation categories of Unicode 8.0, Rust's
// char::is_whitespace / to_lowercase, and regex-crate `\w`. Everything else comes from
// utf8proc (Unicode 15).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace loom::tok::uni {

// ---- UTF-8 ----------------------------------------------------------------------------

// Byte length of the sequence a lead byte starts (1 for continuation bytes, so loops
// over valid text never stall).
inline int utf8_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return lead < 0xC0 ? 1 : 2;
  if (lead < 0xF0) return 3;
  return 4;
}

inline int utf8_size(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

// Decodes the code point at p (text must be valid UTF-8).
inline char32_t decode(const char* p, int* len) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  if (u[0] < 0x80) { *len = 1; return u[0]; }
  if (u[0] < 0xE0) { *len = 2; return ((u[0] & 0x1F) << 6) | (u[1] & 0x3F); }
  if (u[0] < 0xF0) { *len = 3; return ((u[0] & 0x0F) << 12) | ((u[1] & 0x3F) << 6) | (u[2] & 0x3F); }
  *len = 4;
  return ((u[0] & 0x07) << 18) | ((u[1] & 0x3F) << 12) | ((u[2] & 0x3F) << 6) | (u[3] & 0x3F);
}

void append_utf8(std::string& out, char32_t c);

// Returns the byte offset of the first invalid sequence, or npos when s is valid UTF-8
// (no overlongs, no surrogates, nothing above U+10FFFF).
size_t find_invalid_utf8(std::string_view s);

// Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
std::string from_utf8_lossy(std::string_view bytes);

// Number of code points in valid UTF-8 text.
size_t count_chars(std::string_view s);

// ---- properties ------------------------------------------------------------------------

bool is_whitespace(char32_t c);      // Rust char::is_whitespace (White_Space)
bool is_word_char(char32_t c);       // regex-crate \w: Alphabetic, M, Nd, Pc, Join_Control
bool is_ascii_punctuation(char32_t c);
bool is_numeric(char32_t c);         // Rust char::is_numeric: Nd | Nl | No
bool is_punctuation8(char32_t c);    // unicode_categories is_punctuation (Unicode 8)
bool is_other8(char32_t c);          // unicode_categories is_other: Cc | Cf | Co (Unicode 8)
bool is_mark_nonspacing8(char32_t c);  // Mn (Unicode 8)
bool is_combining_mark9(char32_t c);   // General_Category=M (Unicode 9)

// Rust char::to_lowercase: writes up to 3 code points, returns how many.
int to_lowercase(char32_t c, char32_t out[3]);

// ---- normalization data (Unicode 9.0, as unicode-normalization-alignments) -------------

uint8_t ccc9(char32_t c);
// Appends the full canonical (or compatibility) decomposition of c to out; returns the
// count. Characters assigned after 9.0 decompose to themselves.
int decompose9(char32_t c, bool compat, char32_t* out);
// The primary composite of (a, b), or 0.
char32_t compose9(char32_t a, char32_t b);
// True when NFC (Unicode 9) cannot change c whatever surrounds it: no decomposition,
// combining class 0, and never the second char of a composition. Text made only of such
// chars is its own NFC.
bool nfc_inert(char32_t c);

}  // namespace loom::tok::uni
