// Pre-tokenizers: ByteLevel, Split, Metaspace, Whitespace, WhitespaceSplit, Digits,
// Punctuation, CharDelimiterSplit, BertPreTokenizer, Sequence.
#include "tokenizer/byte_level.h"
#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace loom::tok {
namespace {

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void byte_level_transform(NormalizedString& s) {
  const auto& t = ByteLevelTable::get();
  const std::string& str = s.get();
  std::vector<CharChange> dest;
  dest.reserve(str.size());
  for (size_t i = 0; i < str.size();) {
    int len = uni::utf8_len(static_cast<unsigned char>(str[i]));
    for (int k = 0; k < len; ++k) dest.push_back({t.byte_to_char[static_cast<unsigned char>(str[i + k])], k > 0 ? 1 : 0});
    i += len;
  }
  s.transform(dest, 0);
}

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, std::shared_ptr<Regex> re) : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  Status pre_tokenize(PreTokenizedString& pts) const override {
    LOOM_RETURN_IF_ERROR(pts.split([&](NormalizedString&& n, std::vector<NormalizedString>& out) {
      if (add_prefix_space_ && (n.get().empty() || n.get()[0] != ' ')) n.prepend(" ");
      if (re_) {
        auto pieces = n.split(re_->find_matches(n.get()), SplitBehavior::kIsolated);
        for (auto& p : pieces) out.push_back(std::move(p));
      } else {
        out.push_back(std::move(n));
      }
      return Status::Ok();
    }));
    for (Split& s : pts.splits)
      if (!s.has_tokens) byte_level_transform(s.normalized);
    return Status::Ok();
  }

 private:
  bool add_prefix_space_;
  std::shared_ptr<Regex> re_;
};

class SplitPre final : public PreTokenizer {
 public:
  SplitPre(std::string literal, std::shared_ptr<Regex> re, SplitBehavior b, bool invert)
      : literal_(std::move(literal)), re_(std::move(re)), behavior_(b), invert_(invert) {}
  Status pre_tokenize(PreTokenizedString& pts) const override {
    return pts.split([&](NormalizedString&& n, std::vector<NormalizedString>& out) {
      MatchList m = re_ ? re_->find_matches(n.get()) : find_literal(n.get(), literal_);
      if (invert_)
        for (auto& x : m) x.second = !x.second;
      out = n.split(m, behavior_);
      return Status::Ok();
    });
  }

 private:
  std::string literal_;
  std::shared_ptr<Regex> re_;
  SplitBehavior behavior_;
  bool invert_;
};

enum class PrependScheme { kFirst, kNever, kAlways };

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(char32_t replacement, PrependScheme scheme, bool split) : replacement_(replacement), scheme_(scheme), split_(split) {
    uni::append_utf8(rep_, replacement);
  }
  Status pre_tokenize(PreTokenizedString& pts) const override {
    return pts.split([&](NormalizedString&& n, std::vector<NormalizedString>& out) {
      MatchList m = find_literal(n.get(), " ");
      bool any = false;
      for (const auto& x : m) any |= x.second;
      if (any) n.replace(m, rep_);
      bool starts = n.get().compare(0, rep_.size(), rep_) == 0;
      if (scheme_ == PrependScheme::kAlways && !starts) n.prepend(rep_);
      if (scheme_ == PrependScheme::kFirst && !starts && n.original_start() == 0) n.prepend(rep_);
      if (split_) {
        out = n.split(find_literal(n.get(), rep_), SplitBehavior::kMergedWithNext);
      } else {
        out.push_back(std::move(n));
      }
      return Status::Ok();
    });
  }

 private:
  char32_t replacement_;
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

// Splits with a per-char predicate.
template <typename Pred>
class CharSplit final : public PreTokenizer {
 public:
  CharSplit(Pred pred, SplitBehavior b) : pred_(pred), behavior_(b) {}
  Status pre_tokenize(PreTokenizedString& pts) const override {
    return pts.split([&](NormalizedString&& n, std::vector<NormalizedString>& out) {
      out = n.split(find_chars(n.get(), pred_), behavior_);
      return Status::Ok();
    });
  }

 private:
  Pred pred_;
  SplitBehavior behavior_;
};

template <typename Pred>
std::unique_ptr<PreTokenizer> char_split(Pred p, SplitBehavior b) {
  return std::make_unique<CharSplit<Pred>>(p, b);
}

bool is_bert_punc(char32_t c) { return uni::is_ascii_punctuation(c) || uni::is_punctuation8(c); }

// `\w+|[^\w\s]+` (regex crate), matches kept and the rest removed.
class Whitespace final : public PreTokenizer {
 public:
  Status pre_tokenize(PreTokenizedString& pts) const override {
    return pts.split([&](NormalizedString&& n, std::vector<NormalizedString>& out) {
      const std::string& s = n.get();
      MatchList m;
      if (s.empty()) m.push_back({{0, 0}, false});
      uint32_t prev = 0, i = 0;
      while (i < s.size()) {
        int len;
        char32_t c = uni::decode(s.data() + i, &len);
        int kind = uni::is_word_char(c) ? 1 : uni::is_whitespace(c) ? 0 : 2;
        if (kind == 0) {
          i += len;
          continue;
        }
        uint32_t start = i;
        i += len;
        while (i < s.size()) {
          char32_t d = uni::decode(s.data() + i, &len);
          int k2 = uni::is_word_char(d) ? 1 : uni::is_whitespace(d) ? 0 : 2;
          if (k2 != kind) break;
          i += len;
        }
        if (prev != start) m.push_back({{prev, start}, true});
        m.push_back({{start, i}, false});
        prev = i;
      }
      if (!s.empty() && prev != s.size()) m.push_back({{prev, static_cast<uint32_t>(s.size())}, true});
      out = n.split(m, SplitBehavior::kRemoved);
      return Status::Ok();
    });
  }
};

class BertPre final : public PreTokenizer {
 public:
  Status pre_tokenize(PreTokenizedString& pts) const override {
    LOOM_RETURN_IF_ERROR(pts.split([&](NormalizedString&& n, std::vector<NormalizedString>& out) {
      out = n.split(find_chars(n.get(), uni::is_whitespace), SplitBehavior::kRemoved);
      return Status::Ok();
    }));
    return pts.split([&](NormalizedString&& n, std::vector<NormalizedString>& out) {
      out = n.split(find_chars(n.get(), is_bert_punc), SplitBehavior::kIsolated);
      return Status::Ok();
    });
  }
};

class SequencePre final : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> p) : items_(std::move(p)) {}
  Status pre_tokenize(PreTokenizedString& pts) const override {
    for (const auto& p : items_) LOOM_RETURN_IF_ERROR(p->pre_tokenize(pts));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> items_;
};

Result<SplitBehavior> read_behavior(const json& j, const std::string& path, const char* fallback) {
  std::string b = fallback;
  auto it = j.find("behavior");
  if (it != j.end() && !it->is_null()) {
    if (!it->is_string()) return field_error(field_path(path, "behavior"), "expected a string");
    b = it->get<std::string>();
  }
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return field_error(field_path(path, "behavior"), "unknown behavior \"" + b + "\"");
}

}  // namespace

Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const json& j, const std::string& path) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  LOOM_ASSIGN_OR_RETURN(std::string type, read_type(j, path));
  if (type == "ByteLevel") {
    LOOM_ASSIGN_OR_RETURN(bool aps, read_bool(j, path, "add_prefix_space", true));
    LOOM_ASSIGN_OR_RETURN(bool use_regex, read_bool(j, path, "use_regex", true));
    std::shared_ptr<Regex> re;
    if (use_regex) {
      static const std::shared_ptr<Regex> gpt2 = Regex::compile(kGpt2Pattern).value();
      re = gpt2;
    }
    return std::unique_ptr<PreTokenizer>(new ByteLevel(aps, re));
  }
  if (type == "Split") {
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
    LOOM_ASSIGN_OR_RETURN(SplitBehavior b, read_behavior(j, path, "Isolated"));
    LOOM_ASSIGN_OR_RETURN(bool invert, read_bool(j, path, "invert", false));
    return std::unique_ptr<PreTokenizer>(new SplitPre(std::move(literal), std::move(re), b, invert));
  }
  if (type == "Metaspace") {
    LOOM_ASSIGN_OR_RETURN(char32_t rep, read_char(j, path, "replacement"));
    PrependScheme scheme = PrependScheme::kAlways;
    LOOM_ASSIGN_OR_RETURN(std::optional<std::string> ps, read_opt_string(j, path, "prepend_scheme"));
    if (ps) {
      if (*ps == "first") scheme = PrependScheme::kFirst;
      else if (*ps == "never") scheme = PrependScheme::kNever;
      else if (*ps == "always") scheme = PrependScheme::kAlways;
      else return field_error(field_path(path, "prepend_scheme"), "unknown scheme \"" + *ps + "\"");
    }
    auto aps = j.find("add_prefix_space");
    if (aps != j.end() && aps->is_boolean() && !aps->get<bool>()) {
      if (ps && scheme != PrependScheme::kNever)
        return field_error(field_path(path, "add_prefix_space"), "add_prefix_space does not match declared prepend_scheme");
      scheme = PrependScheme::kNever;
    }
    LOOM_ASSIGN_OR_RETURN(bool split, read_bool(j, path, "split", true));
    return std::unique_ptr<PreTokenizer>(new Metaspace(rep, scheme, split));
  }
  if (type == "Whitespace") return std::unique_ptr<PreTokenizer>(new Whitespace());
  if (type == "WhitespaceSplit") return char_split(uni::is_whitespace, SplitBehavior::kRemoved);
  if (type == "BertPreTokenizer") return std::unique_ptr<PreTokenizer>(new BertPre());
  if (type == "Punctuation") {
    LOOM_ASSIGN_OR_RETURN(SplitBehavior b, read_behavior(j, path, "Isolated"));
    return char_split(is_bert_punc, b);
  }
  if (type == "Digits") {
    LOOM_ASSIGN_OR_RETURN(bool individual, read_bool(j, path, "individual_digits", false));
    return char_split(uni::is_numeric, individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  }
  if (type == "CharDelimiterSplit") {
    LOOM_ASSIGN_OR_RETURN(char32_t d, read_char(j, path, "delimiter"));
    struct Is {
      char32_t d;
      bool operator()(char32_t c) const { return c == d; }
    };
    return char_split(Is{d}, SplitBehavior::kRemoved);
  }
  if (type == "Sequence") {
    LOOM_ASSIGN_OR_RETURN(auto items, read_sequence<PreTokenizer>(j, path, "pretokenizers", "a pre-tokenizer", make_pre_tokenizer));
    return std::unique_ptr<PreTokenizer>(new SequencePre(std::move(items)));
  }
  return unsupported(path + ": unknown type \"" + type + "\"");
}

}  // namespace loom::tok
