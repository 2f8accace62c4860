#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace loom::tok::uni {
namespace {

struct AgeRange {
  char32_t first, last;
  int age10;
};
struct CodeRange {
  char32_t first, last;
};
struct CompositionPair {
  char32_t first, second, composite;
};

#include "tokenizer/unicode_tables.inc"

template <typename R, size_t N>
const R* find_range(const R (&table)[N], char32_t c) {
  const R* it = std::upper_bound(table, table + N, c, [](char32_t v, const R& r) { return v < r.first; });
  if (it == table) return nullptr;
  --it;
  return c <= it->last ? it : nullptr;
}

// Unicode version (times ten) that first assigned c, or 0 when c was assigned by 8.0
// or is unassigned even in Unicode 15.
int late_age(char32_t c) {
  if (c < 0x560) return 0;
  const AgeRange* r = find_range(kLateAges, c);
  return r ? r->age10 : 0;
}

bool assigned_by(char32_t c, int version10) {
  int a = late_age(c);
  return a == 0 || a <= version10;
}

int category(char32_t c) { return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->category; }

struct Compositions {
  std::unordered_map<uint64_t, char32_t> map;
  Compositions() {
    map.reserve(sizeof(kCompositions) / sizeof(kCompositions[0]) * 2);
    for (const auto& p : kCompositions) map.emplace((uint64_t(p.first) << 21) | p.second, p.composite);
  }
};

}  // namespace

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// Length of the valid sequence at s[i], 0 if invalid; *subpart gets the length of the
// maximal invalid prefix (Unicode's "maximal subpart" used by from_utf8_lossy).
static int valid_seq(const unsigned char* s, size_t n, size_t i, int* subpart) {
  unsigned char b = s[i];
  *subpart = 1;
  if (b < 0x80) return 1;
  int len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k < len; ++k) {
    if (i + k >= n) return 0;
    unsigned char c = s[i + k];
    unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) return 0;
    *subpart = k + 1;
  }
  return len;
}

size_t find_invalid_utf8(std::string_view s) {
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size();
  while (i < n) {
    if (u[i] < 0x80) {
      ++i;
      continue;
    }
    int sub;
    int len = valid_seq(u, n, i, &sub);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string from_utf8_lossy(std::string_view bytes) {
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0, n = bytes.size();
  std::string out;
  out.reserve(n);
  while (i < n) {
    if (u[i] < 0x80) {
      out.push_back(static_cast<char>(u[i++]));
      continue;
    }
    int sub;
    int len = valid_seq(u, n, i, &sub);
    if (len) {
      out.append(bytes.data() + i, len);
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      i += sub;
    }
  }
  return out;
}

size_t count_chars(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_whitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return find_range(kWhiteSpace, c) != nullptr;
}

bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;
  if (find_range(kAlphabetic, c)) return true;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  int cat = category(c);
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool is_ascii_punctuation(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}

// General categories changed since Unicode 8/9 for a few characters that existed then
// (listed in the tokenizers-compatibility notes of gen_unicode_tables.py's callers).
bool is_punctuation8(char32_t c) {
  if (c == 0x166D || c == 0x111C9) return true;
  if (!assigned_by(c, 80)) return false;
  int cat = category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

bool is_other8(char32_t c) {
  if (!assigned_by(c, 80)) return false;
  int cat = category(c);
  return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CO;
}

bool is_mark_nonspacing8(char32_t c) {
  switch (c) {
    case 0x1734: case 0x1171E: return true;
    case 0x1885: case 0x1886: case 0xA9BD: case 0x111C9: return false;
    default: break;
  }
  return assigned_by(c, 80) && category(c) == UTF8PROC_CATEGORY_MN;
}

bool is_combining_mark9(char32_t c) {
  switch (c) {
    case 0x1CF2: case 0x1CF3: return true;
    case 0x111C9: return false;
    default: break;
  }
  if (!assigned_by(c, 90)) return false;
  int cat = category(c);
  return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME;
}

int to_lowercase(char32_t c, char32_t out[3]) {
  if (c < 0x80) {
    out[0] = (c >= 'A' && c <= 'Z') ? c + 32 : c;
    return 1;
  }
  if (c == 0x130) {  // the only unconditional multi-char lowercase mapping
    out[0] = 'i';
    out[1] = 0x307;
    return 2;
  }
  out[0] = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
  return 1;
}

uint8_t ccc9(char32_t c) {
  if (c < 0x300) return 0;
  if (!assigned_by(c, 90)) return 0;
  return static_cast<uint8_t>(utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class);
}

int decompose9(char32_t c, bool compat, char32_t* out) {
  if (c < 0x80 || !assigned_by(c, 90)) {
    out[0] = c;
    return 1;
  }
  utf8proc_int32_t buf[32];
  int last_boundclass = 0;
  int opts = UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0);
  utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buf, 32,
                                               static_cast<utf8proc_option_t>(opts), &last_boundclass);
  if (n <= 0 || n > 32) {
    out[0] = c;
    return 1;
  }
  for (utf8proc_ssize_t i = 0; i < n; ++i) out[i] = static_cast<char32_t>(buf[i]);
  return static_cast<int>(n);
}

char32_t compose9(char32_t a, char32_t b) {
  constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
  constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kSCount = 11172;
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && b > kTBase && b < kTBase + kTCount && (a - kSBase) % kTCount == 0)
    return a + (b - kTBase);
  static const Compositions table;
  auto it = table.map.find((uint64_t(a) << 21) | b);
  return it == table.map.end() ? 0 : it->second;
}

static bool nfc_inert_slow(char32_t c, const std::vector<uint8_t>& seconds) {
  if (c < 0x300) return true;
  if (c >= 0x1161 && c <= 0x1175) return false;  // Hangul V and T jamo compose with L / LV
  if (c >= 0x11A8 && c <= 0x11C2) return false;
  if (c < seconds.size() * 8 && (seconds[c >> 3] >> (c & 7) & 1)) return false;
  if (ccc9(c) != 0) return false;
  char32_t buf[32];
  int n = decompose9(c, false, buf);
  return n == 1 && buf[0] == c;
}

bool nfc_inert(char32_t c) {
  struct Table {
    std::vector<uint8_t> seconds;  // bitset over code points that are a composition's second char
    std::vector<uint8_t> bmp;      // bitset: nfc_inert for the BMP
    Table() {
      char32_t max_second = 0;
      for (const auto& p : kCompositions) max_second = std::max(max_second, p.second);
      seconds.assign(max_second / 8 + 1, 0);
      for (const auto& p : kCompositions) seconds[p.second >> 3] |= static_cast<uint8_t>(1u << (p.second & 7));
      bmp.assign(0x10000 / 8, 0);
      for (char32_t c = 0; c < 0x10000; ++c)
        if (nfc_inert_slow(c, seconds)) bmp[c >> 3] |= static_cast<uint8_t>(1u << (c & 7));
    }
  };
  static const Table table;
  if (c < 0x10000) return table.bmp[c >> 3] >> (c & 7) & 1;
  return nfc_inert_slow(c, table.seconds);
}

}  // namespace loom::tok::uni
