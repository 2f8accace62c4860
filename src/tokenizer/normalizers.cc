// Normalizers: NFC/NFD/NFKC/NFKD, Lowercase, Strip, StripAccents, Replace, Prepend,
// Precompiled (SentencePiece charsmap), BertNormalizer, Nmt, Sequence.
#include <utf8proc.h>

#include <cstring>

#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace loom::tok {
namespace {

class UnicodeNorm final : public Normalizer {
 public:
  enum Form { kNFC, kNFD, kNFKC, kNFKD };
  explicit UnicodeNorm(Form f) : form_(f) {}
  Status normalize(NormalizedString& s) const override {
    switch (form_) {
      case kNFC: s.nfc(); break;
      case kNFD: s.nfd(); break;
      case kNFKC: s.nfkc(); break;
      case kNFKD: s.nfkd(); break;
    }
    return Status::Ok();
  }

 private:
  Form form_;
};

class Lowercase final : public Normalizer {
 public:
  Status normalize(NormalizedString& s) const override {
    s.lowercase();
    return Status::Ok();
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  Status normalize(NormalizedString& s) const override {
    if (left_ && right_) {
      s.strip();
    } else {
      if (left_) s.lstrip();
      if (right_) s.rstrip();
    }
    return Status::Ok();
  }

 private:
  bool left_, right_;
};

class StripAccents final : public Normalizer {
 public:
  Status normalize(NormalizedString& s) const override {
    s.filter([](char32_t c) { return !uni::is_combining_mark9(c); });
    return Status::Ok();
  }
};

class Nmt final : public Normalizer {
 public:
  Status normalize(NormalizedString& s) const override {
    s.filter([](char32_t c) {
      return !((c >= 0x1 && c <= 0x8) || c == 0xB || (c >= 0xE && c <= 0x1F) || c == 0x7F || c == 0x8F || c == 0x9F);
    });
    s.map([](char32_t c) -> char32_t {
      switch (c) {
        case 0x9: case 0xA: case 0xC: case 0xD: case 0x1680: case 0x2028: case 0x2029: case 0x2581:
        case 0xFEFF: case 0xFFFD:
          return ' ';
        default:
          return (c >= 0x200B && c <= 0x200F) ? ' ' : c;
      }
    });
    return Status::Ok();
  }
};

// A Replace/Split pattern: {"String": "..."} or {"Regex": "..."}.
struct Pattern {
  std::string literal;
  std::shared_ptr<Regex> regex;
  MatchList find(std::string_view s) const { return regex ? regex->find_matches(s) : find_literal(s, literal); }
};

Result<Pattern> read_pattern(const json& j, const std::string& path) {
  auto it = j.find("pattern");
  if (it == j.end() || !it->is_object()) return field_error(field_path(path, "pattern"), "expected {\"String\": ...} or {\"Regex\": ...}");
  Pattern p;
  if (it->contains("String") && (*it)["String"].is_string()) {
    p.literal = (*it)["String"].get<std::string>();
  } else if (it->contains("Regex") && (*it)["Regex"].is_string()) {
    auto re = Regex::compile((*it)["Regex"].get<std::string>());
    if (!re.ok()) return field_error(field_path(path, "pattern.Regex"), re.status().message());
    p.regex = re.value();
  } else {
    return field_error(field_path(path, "pattern"), "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  return p;
}

class Replace final : public Normalizer {
 public:
  Replace(Pattern p, std::string content) : pattern_(std::move(p)), content_(std::move(content)) {}
  Status normalize(NormalizedString& s) const override {
    MatchList m = pattern_.find(s.get());
    bool any = false;
    for (const auto& x : m) any |= x.second;
    if (any) s.replace(m, content_);
    return Status::Ok();
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string p) : prepend_(std::move(p)) {}
  Status normalize(NormalizedString& s) const override {
    if (!s.empty()) s.prepend(prepend_);
    return Status::Ok();
  }

 private:
  std::string prepend_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> n) : normalizers_(std::move(n)) {}
  Status normalize(NormalizedString& s) const override {
    for (const auto& n : normalizers_) LOOM_RETURN_IF_ERROR(n->normalize(s));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> normalizers_;
};

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_text_(clean_text), chinese_(chinese), strip_accents_(strip_accents), lowercase_(lowercase) {}
  Status normalize(NormalizedString& s) const override {
    if (clean_text_) {
      s.filter([](char32_t c) {
        bool control = c != '\t' && c != '\n' && c != '\r' && uni::is_other8(c);
        return !(c == 0 || c == 0xFFFD || control);
      });
      s.map([](char32_t c) -> char32_t {
        bool ws = c == '\t' || c == '\n' || c == '\r' || uni::is_whitespace(c);
        return ws ? U' ' : c;
      });
    }
    if (chinese_) {
      std::vector<CharChange> dest;
      bool any = false;
      for (char32_t c : to_chars(s.get())) {
        if (is_chinese_char(c)) {
          dest.push_back({U' ', 0});
          dest.push_back({c, 1});
          dest.push_back({U' ', 1});
          any = true;
        } else {
          dest.push_back({c, 0});
        }
      }
      if (any) s.transform(dest, 0);
    }
    if (strip_accents_) {
      s.nfd();
      s.filter([](char32_t c) { return !uni::is_mark_nonspacing8(c); });
    }
    if (lowercase_) s.lowercase();
    return Status::Ok();
  }

 private:
  bool clean_text_, chinese_, strip_accents_, lowercase_;
};

// SentencePiece's precompiled charsmap: a darts-clone double array over UTF-8 keys whose
// values index NUL-terminated replacements.
class Precompiled final : public Normalizer {
 public:
  static Result<std::unique_ptr<Precompiled>> parse(const std::string& blob, const std::string& path) {
    auto out = std::make_unique<Precompiled>();
    if (blob.empty()) return out;
    if (blob.size() < 4) return field_error(path, "precompiled_charsmap too short");
    uint32_t trie_bytes = static_cast<uint8_t>(blob[0]) | (static_cast<uint8_t>(blob[1]) << 8) |
                          (static_cast<uint8_t>(blob[2]) << 16) | (static_cast<uint32_t>(static_cast<uint8_t>(blob[3])) << 24);
    if (trie_bytes % 4 != 0 || 4ull + trie_bytes > blob.size() || trie_bytes == 0)
      return field_error(path, "precompiled_charsmap: bad trie size " + std::to_string(trie_bytes));
    out->units_.resize(trie_bytes / 4);
    std::memcpy(out->units_.data(), blob.data() + 4, trie_bytes);
    out->normalized_ = blob.substr(4 + trie_bytes);
    return out;
  }

  Status normalize(NormalizedString& s) const override {
    if (units_.empty()) return Status::Ok();
    const std::string& str = s.get();
    std::vector<CharChange> dest;
    dest.reserve(str.size());
    bool modified = false;
    size_t i = 0;
    utf8proc_int32_t state = 0;
    while (i < str.size()) {
      // One extended grapheme cluster [i, j).
      int len;
      char32_t prev = uni::decode(str.data() + i, &len);
      size_t j = i + len;
      while (j < str.size()) {
        char32_t c = uni::decode(str.data() + j, &len);
        if (utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev), static_cast<utf8proc_int32_t>(c), &state))
          break;
        prev = c;
        j += len;
      }
      state = 0;
      std::string_view g(str.data() + i, j - i);
      std::string_view norm;
      if (g.size() < 6 && transform(g, &norm)) {
        modified = true;
        replace(dest, g, norm);
      } else {
        for (size_t k = 0; k < g.size();) {
          char32_t c = uni::decode(g.data() + k, &len);
          std::string_view part = g.substr(k, len);
          if (transform(part, &norm)) {
            modified = true;
            replace(dest, part, norm);
          } else {
            dest.push_back({c, 0});
          }
          k += len;
        }
      }
      i = j;
    }
    if (modified) s.transform(dest, 0);
    return Status::Ok();
  }

 private:
  static uint32_t offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
  static uint32_t label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
  static bool has_leaf(uint32_t u) { return (u >> 8) & 1; }
  static uint32_t value(uint32_t u) { return u & ((1u << 31) - 1); }

  // The first (shortest) rule matching a prefix of chunk, like spm_precompiled.
  bool transform(std::string_view chunk, std::string_view* out) const {
    size_t node = offset(units_[0]);
    for (unsigned char c : chunk) {
      if (c == 0) break;
      node ^= c;
      if (node >= units_.size()) return false;
      uint32_t u = units_[node];
      if (label(u) != c) return false;
      node ^= offset(u);
      if (has_leaf(u)) {
        if (node >= units_.size()) return false;
        size_t start = value(units_[node]);
        if (start > normalized_.size()) return false;
        size_t end = normalized_.find('\0', start);
        if (end == std::string::npos) end = normalized_.size();
        *out = std::string_view(normalized_).substr(start, end - start);
        return true;
      }
    }
    return false;
  }

  static void replace(std::vector<CharChange>& dest, std::string_view old_part, std::string_view new_part) {
    int64_t old_count = static_cast<int64_t>(uni::count_chars(old_part));
    std::vector<char32_t> cs = to_chars(new_part);
    int64_t diff = static_cast<int64_t>(cs.size()) - old_count;
    for (char32_t c : cs) dest.push_back({c, 0});
    if (diff > 0) {
      for (int64_t k = 0; k < diff && k < static_cast<int64_t>(dest.size()); ++k) dest[dest.size() - 1 - k].change = 1;
    } else if (diff < 0 && !dest.empty()) {
      dest.back().change += static_cast<int32_t>(diff);
    }
  }

  std::vector<uint32_t> units_;
  std::string normalized_;
};

Result<std::string> base64_decode(const std::string& in, const std::string& path) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=' || c == '\n' || c == '\r') continue;
    int v = val(c);
    if (v < 0) return field_error(path, "invalid base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<Normalizer>> make_normalizer(const json& j, const std::string& path) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  LOOM_ASSIGN_OR_RETURN(std::string type, read_type(j, path));
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNorm(UnicodeNorm::kNFC));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNorm(UnicodeNorm::kNFD));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNorm(UnicodeNorm::kNFKC));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNorm(UnicodeNorm::kNFKD));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new Lowercase());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccents());
  if (type == "Nmt") return std::unique_ptr<Normalizer>(new Nmt());
  if (type == "Strip") {
    LOOM_ASSIGN_OR_RETURN(bool l, read_bool(j, path, "strip_left", true));
    LOOM_ASSIGN_OR_RETURN(bool r, read_bool(j, path, "strip_right", true));
    return std::unique_ptr<Normalizer>(new Strip(l, r));
  }
  if (type == "Replace") {
    LOOM_ASSIGN_OR_RETURN(Pattern p, read_pattern(j, path));
    LOOM_ASSIGN_OR_RETURN(std::string content, read_string(j, path, "content"));
    return std::unique_ptr<Normalizer>(new Replace(std::move(p), std::move(content)));
  }
  if (type == "Prepend") {
    LOOM_ASSIGN_OR_RETURN(std::string p, read_string(j, path, "prepend"));
    return std::unique_ptr<Normalizer>(new Prepend(std::move(p)));
  }
  if (type == "BertNormalizer") {
    LOOM_ASSIGN_OR_RETURN(bool clean, read_bool(j, path, "clean_text", true));
    LOOM_ASSIGN_OR_RETURN(bool chinese, read_bool(j, path, "handle_chinese_chars", true));
    LOOM_ASSIGN_OR_RETURN(bool lower, read_bool(j, path, "lowercase", true));
    LOOM_ASSIGN_OR_RETURN(bool strip, read_bool(j, path, "strip_accents", lower));
    return std::unique_ptr<Normalizer>(new BertNormalizer(clean, chinese, strip, lower));
  }
  if (type == "Precompiled") {
    auto it = j.find("precompiled_charsmap");
    std::string blob;
    if (it != j.end() && !it->is_null()) {
      if (!it->is_string()) return field_error(field_path(path, "precompiled_charsmap"), "expected a base64 string");
      LOOM_ASSIGN_OR_RETURN(blob, base64_decode(it->get<std::string>(), field_path(path, "precompiled_charsmap")));
    }
    LOOM_ASSIGN_OR_RETURN(auto p, Precompiled::parse(blob, field_path(path, "precompiled_charsmap")));
    return std::unique_ptr<Normalizer>(std::move(p));
  }
  if (type == "Sequence") {
    LOOM_ASSIGN_OR_RETURN(auto items, read_sequence<Normalizer>(j, path, "normalizers", "a normalizer", make_normalizer));
    return std::unique_ptr<Normalizer>(new Sequence(std::move(items)));
  }
  return unsupported(path + ": unknown type \"" + type + "\"");
}

}  // namespace loom::tok
