#include "loom/tokenizer/jinja/utf8.h"

namespace loom::jinja::utf8 {

std::vector<char32_t> decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    char32_t cp;
    size_t len;
    if (c < 0x80) {
      cp = c;
      len = 1;
    } else if ((c >> 5) == 0x6) {
      cp = c & 0x1f;
      len = 2;
    } else if ((c >> 4) == 0xe) {
      cp = c & 0x0f;
      len = 3;
    } else if ((c >> 3) == 0x1e) {
      cp = c & 0x07;
      len = 4;
    } else {
      out.push_back(0xfffd);
      ++i;
      continue;
    }
    if (i + len > n) {
      out.push_back(0xfffd);
      ++i;
      continue;
    }
    bool ok = true;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 0x2) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (!ok) {
      out.push_back(0xfffd);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

std::string encode(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append(out, cp);
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) ++n;
  }
  return n;
}

bool is_space(char32_t cp) {
  switch (cp) {
    case ' ': case '\t': case '\n': case '\r': case 0x0b: case 0x0c:
    case 0x1c: case 0x1d: case 0x1e: case 0x1f: case 0x85: case 0xa0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202f: case 0x205f: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200a;
  }
}

char32_t to_upper(char32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp < 0x80) return cp;
  if (cp == 0xb5) return 0x39c;  // micro sign → Greek capital mu
  if ((cp >= 0xe0 && cp <= 0xfe && cp != 0xf7)) return cp - 32;
  if (cp == 0xff) return 0x178;
  if (cp >= 0x100 && cp <= 0x17f) {
    // Latin Extended-A pairs capital/small on even/odd code points, except the
    // run 0x139–0x148 and 0x179–0x17e which pair odd/even.
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17e)) return (cp % 2 == 0) ? cp - 1 : cp;
    if (cp == 0x131) return 'I';
    if (cp == 0x17f) return 'S';
    if (cp == 0x138 || cp == 0x149) return cp;
    return (cp % 2 == 1) ? cp - 1 : cp;
  }
  if (cp >= 0x3b1 && cp <= 0x3c9 && cp != 0x3c2) return cp - 32;
  if (cp == 0x3c2) return 0x3a3;  // final sigma
  if (cp == 0x3ac) return 0x386;
  if (cp >= 0x3ad && cp <= 0x3af) return cp - 37;
  if (cp == 0x3cc) return 0x38c;
  if (cp == 0x3cd || cp == 0x3ce) return cp - 63;
  if (cp >= 0x430 && cp <= 0x44f) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45f) return cp - 80;
  return cp;
}

char32_t to_lower(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp < 0x80) return cp;
  if (cp >= 0xc0 && cp <= 0xde && cp != 0xd7) return cp + 32;
  if (cp == 0x178) return 0xff;
  if (cp >= 0x100 && cp <= 0x17f) {
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17e)) return (cp % 2 == 1) ? cp + 1 : cp;
    if (cp == 0x130) return 'i';
    if (cp == 0x138 || cp == 0x149 || cp == 0x17f) return cp;
    return (cp % 2 == 0) ? cp + 1 : cp;
  }
  if (cp >= 0x391 && cp <= 0x3a9 && cp != 0x3a2) return cp + 32;
  if (cp == 0x386) return 0x3ac;
  if (cp >= 0x388 && cp <= 0x38a) return cp + 37;
  if (cp == 0x38c) return 0x3cc;
  if (cp == 0x38e || cp == 0x38f) return cp + 63;
  if (cp >= 0x410 && cp <= 0x42f) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40f) return cp + 80;
  return cp;
}

bool is_cased_letter(char32_t cp) { return to_upper(cp) != cp || to_lower(cp) != cp; }

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : decode(s)) {
    if (cp == 0xdf) {
      out += "SS";  // the one full (one-to-many) mapping common in real text
    } else {
      append(out, to_upper(cp));
    }
  }
  return out;
}

std::string lower(std::string_view s) {
  const std::vector<char32_t> cps = decode(s);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    // Unicode Final_Sigma: capital sigma ending a word lowers to final sigma.
    if (cps[i] == 0x3a3 && i > 0 && is_cased_letter(cps[i - 1]) &&
        (i + 1 == cps.size() || !is_cased_letter(cps[i + 1]))) {
      append(out, 0x3c2);
    } else {
      append(out, to_lower(cps[i]));
    }
  }
  return out;
}

std::string title(std::string_view s) {
  // Python: a cased letter is upper-cased after an uncased character, lower-cased
  // after a cased one; digits and other letters count as uncased.
  std::string out;
  out.reserve(s.size());
  bool previous_cased = false;
  for (char32_t cp : decode(s)) {
    const bool cased = is_cased_letter(cp);
    append(out, cased ? (previous_cased ? to_lower(cp) : to_upper(cp)) : cp);
    previous_cased = cased;
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool first = true;
  for (char32_t cp : decode(s)) {
    append(out, first ? to_upper(cp) : to_lower(cp));
    first = false;
  }
  return out;
}

}  // namespace loom::jinja::utf8
