// Decoders: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, WordPiece,
// BPEDecoder, CTC, Sequence — each a decode_chain over token strings, as in `tokenizers`.
#include "tokenizer/byte_level.h"
#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace loom::tok {
namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0, hit;
  bool any = false;
  while ((hit = s.find(from, pos)) != std::string::npos) {
    out.append(s, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
    any = true;
  }
  if (!any) return;
  out.append(s, pos);
  s = std::move(out);
}

class ByteLevelDec final : public Decoder {
 public:
  Status decode_chain(std::vector<std::string>& tokens) const override {
    const auto& t = ByteLevelTable::get();
    std::string bytes;
    for (const std::string& tok : tokens) {
      size_t mark = bytes.size();
      bool ok = true;
      for (size_t i = 0; i < tok.size();) {
        int len;
        char32_t c = uni::decode(tok.data() + i, &len);
        i += len;
        if (c >= t.char_to_byte.size() || t.char_to_byte[c] == 0) {
          ok = false;
          break;
        }
        bytes.push_back(static_cast<char>(t.char_to_byte[c] - 1));
      }
      if (!ok) {
        bytes.resize(mark);
        bytes += tok;
      }
    }
    tokens.assign(1, uni::from_utf8_lossy(bytes));
    return Status::Ok();
  }
};

class MetaspaceDec final : public Decoder {
 public:
  MetaspaceDec(char32_t rep, bool prepend) : prepend_(prepend) { uni::append_utf8(rep_, rep); }
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) replace_all(tokens[i], rep_, i == 0 && prepend_ ? "" : " ");
    return Status::Ok();
  }

 private:
  std::string rep_;
  bool prepend_;
};

class ByteFallbackDec final : public Decoder {
 public:
  Status decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (uni::find_invalid_utf8(pending) == std::string::npos) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending.size(); ++k) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& tok : tokens) {
      int byte = parse_byte(tok);
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(tok));
      }
    }
    flush();
    tokens = std::move(out);
    return Status::Ok();
  }

  // "<0xAB>" → 0xAB; Rust's u8::from_str_radix also takes a leading '+'.
  static int parse_byte(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (t[3] == '+') return hex(t[4]);
    int hi = hex(t[3]), lo = hex(t[4]);
    if (hi < 0 || lo < 0) return -1;
    return hi * 16 + lo;
  }
};

class FuseDec final : public Decoder {
 public:
  Status decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
    return Status::Ok();
  }
};

class StripDec final : public Decoder {
 public:
  StripDec(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& tok : tokens) {
      std::vector<char32_t> cs = to_chars(tok);
      size_t start_cut = 0;
      for (size_t i = 0; i < start_ && i < cs.size(); ++i) {
        if (cs[i] != content_) break;
        start_cut = i + 1;
      }
      size_t stop_cut = cs.size();
      for (size_t i = 0; i < stop_ && i < cs.size(); ++i) {
        size_t index = cs.size() - i - 1;
        if (cs[index] != content_) break;
        stop_cut = index;
      }
      std::string out;
      for (size_t i = start_cut; i < stop_cut; ++i) uni::append_utf8(out, cs[i]);
      tok = std::move(out);
    }
    return Status::Ok();
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDec final : public Decoder {
 public:
  ReplaceDec(std::string literal, std::shared_ptr<Regex> re, std::string content)
      : literal_(std::move(literal)), re_(std::move(re)), content_(std::move(content)) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& tok : tokens) {
      if (!re_) {
        replace_all(tok, literal_, content_);
        continue;
      }
      std::string out;
      for (const auto& [r, is_match] : re_->find_matches(tok)) {
        if (is_match) {
          out += content_;
        } else {
          out.append(tok, r.first, r.second - r.first);
        }
      }
      tok = std::move(out);
    }
    return Status::Ok();
  }

 private:
  std::string literal_;
  std::shared_ptr<Regex> re_;
  std::string content_;
};

void wordpiece_cleanup(std::string& s) {
  replace_all(s, " .", ".");
  replace_all(s, " ?", "?");
  replace_all(s, " !", "!");
  replace_all(s, " ,", ",");
  replace_all(s, " ' ", "'");
  replace_all(s, " n't", "n't");
  replace_all(s, " 'm", "'m");
  replace_all(s, " do not", " don't");
  replace_all(s, " 's", "'s");
  replace_all(s, " 've", "'ve");
  replace_all(s, " 're", "'re");
}

class WordPieceDec final : public Decoder {
 public:
  WordPieceDec(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0) {
          t.erase(0, prefix_.size());
        } else {
          t.insert(0, " ");
        }
      }
      if (cleanup_) wordpiece_cleanup(t);
    }
    return Status::Ok();
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class BpeDec final : public Decoder {
 public:
  explicit BpeDec(std::string suffix) : suffix_(std::move(suffix)) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) replace_all(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
    return Status::Ok();
  }

 private:
  std::string suffix_;
};

class CtcDec final : public Decoder {
 public:
  CtcDec(std::string pad, std::string delim, bool cleanup) : pad_(std::move(pad)), delim_(std::move(delim)), cleanup_(cleanup) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 && tokens[i] == tokens[i - 1]) continue;
      std::string t = tokens[i];
      replace_all(t, pad_, "");
      if (cleanup_) {
        wordpiece_cleanup(t);
        replace_all(t, delim_, " ");
      }
      if (!t.empty()) out.push_back(std::move(t));
    }
    tokens = std::move(out);
    return Status::Ok();
  }

 private:
  std::string pad_, delim_;
  bool cleanup_;
};

class SequenceDec final : public Decoder {
 public:
  explicit SequenceDec(std::vector<std::unique_ptr<Decoder>> d) : items_(std::move(d)) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : items_) LOOM_RETURN_IF_ERROR(d->decode_chain(tokens));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Decoder>> items_;
};

}  // namespace

Result<std::unique_ptr<Decoder>> make_decoder(const json& j, const std::string& path) {
  if (j.is_null()) return std::unique_ptr<Decoder>();
  LOOM_ASSIGN_OR_RETURN(std::string type, read_type(j, path));
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDec());
  if (type == "Metaspace") {
    LOOM_ASSIGN_OR_RETURN(char32_t rep, read_char(j, path, "replacement"));
    bool prepend = true;
    LOOM_ASSIGN_OR_RETURN(std::optional<std::string> ps, read_opt_string(j, path, "prepend_scheme"));
    if (ps) {
      if (*ps != "first" && *ps != "never" && *ps != "always")
        return field_error(field_path(path, "prepend_scheme"), "unknown scheme \"" + *ps + "\"");
      prepend = *ps != "never";
    }
    auto aps = j.find("add_prefix_space");
    if (aps != j.end() && aps->is_boolean() && !aps->get<bool>()) prepend = false;
    return std::unique_ptr<Decoder>(new MetaspaceDec(rep, prepend));
  }
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDec());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDec());
  if (type == "Strip") {
    LOOM_ASSIGN_OR_RETURN(char32_t c, read_char(j, path, "content"));
    LOOM_ASSIGN_OR_RETURN(int64_t start, read_int(j, path, "start", int64_t{0}));
    LOOM_ASSIGN_OR_RETURN(int64_t stop, read_int(j, path, "stop", int64_t{0}));
    if (start < 0 || stop < 0) return field_error(path, "start/stop must be non-negative");
    return std::unique_ptr<Decoder>(new StripDec(c, static_cast<size_t>(start), static_cast<size_t>(stop)));
  }
  if (type == "Replace") {
    auto it = j.find("pattern");
    if (it == j.end() || !it->is_object()) return field_error(field_path(path, "pattern"), "expected {\"String\": ...} or {\"Regex\": ...}");
    std::string literal;
    std::shared_ptr<Regex> re;
    if (it->contains("String") && (*it)["String"].is_string()) {
      literal = (*it)["String"].get<std::string>();
    } else if (it->contains("Regex") && (*it)["Regex"].is_string()) {
      auto r = Regex::compile((*it)["Regex"].get<std::string>());
      if (!r.ok()) return field_error(field_path(path, "pattern.Regex"), r.status().message());
      re = r.value();
    } else {
      return field_error(field_path(path, "pattern"), "expected {\"String\": ...} or {\"Regex\": ...}");
    }
    LOOM_ASSIGN_OR_RETURN(std::string content, read_string(j, path, "content"));
    return std::unique_ptr<Decoder>(new ReplaceDec(std::move(literal), std::move(re), std::move(content)));
  }
  if (type == "WordPiece") {
    LOOM_ASSIGN_OR_RETURN(auto prefix, read_opt_string(j, path, "prefix"));
    LOOM_ASSIGN_OR_RETURN(bool cleanup, read_bool(j, path, "cleanup", true));
    return std::unique_ptr<Decoder>(new WordPieceDec(prefix.value_or("##"), cleanup));
  }
  if (type == "BPEDecoder") {
    LOOM_ASSIGN_OR_RETURN(auto suffix, read_opt_string(j, path, "suffix"));
    return std::unique_ptr<Decoder>(new BpeDec(suffix.value_or("</w>")));
  }
  if (type == "CTC") {
    LOOM_ASSIGN_OR_RETURN(auto pad, read_opt_string(j, path, "pad_token"));
    LOOM_ASSIGN_OR_RETURN(auto delim, read_opt_string(j, path, "word_delimiter_token"));
    LOOM_ASSIGN_OR_RETURN(bool cleanup, read_bool(j, path, "cleanup", true));
    return std::unique_ptr<Decoder>(new CtcDec(pad.value_or("<pad>"), delim.value_or("|"), cleanup));
  }
  if (type == "Sequence") {
    LOOM_ASSIGN_OR_RETURN(auto items, read_sequence<Decoder>(j, path, "decoders", "a decoder", make_decoder));
    return std::unique_ptr<Decoder>(new SequenceDec(std::move(items)));
  }
  return unsupported(path + ": unknown type \"" + type + "\"");
}

}  // namespace loom::tok
