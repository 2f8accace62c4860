#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "loom/core/logging.h"
#include "tokenizer/unicode.h"

namespace loom::tok {

void TokenTrie::build(const std::vector<std::string>& patterns) {
  nodes_.assign(1, Node{});
  std::fill(std::begin(first_byte_), std::end(first_byte_), false);
  patterns_ = 0;
  for (size_t p = 0; p < patterns.size(); ++p) {
    const std::string& s = patterns[p];
    if (s.empty()) continue;
    ++patterns_;
    first_byte_[static_cast<unsigned char>(s[0])] = true;
    uint32_t n = 0;
    for (unsigned char c : s) {
      auto it = nodes_[n].next.find(c);
      if (it == nodes_[n].next.end()) {
        uint32_t child = static_cast<uint32_t>(nodes_.size());
        nodes_[n].next.emplace(c, child);
        nodes_.push_back(Node{});
        n = child;
      } else {
        n = it->second;
      }
    }
    if (nodes_[n].pattern < 0) nodes_[n].pattern = static_cast<int32_t>(p);  // first pattern wins ties
  }
}

bool TokenTrie::find(std::string_view s, size_t from, size_t* start, size_t* end, size_t* pattern) const {
  if (patterns_ == 0) return false;
  for (size_t i = from; i < s.size(); ++i) {
    if (!first_byte_[static_cast<unsigned char>(s[i])]) continue;
    uint32_t n = 0;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t k = i; k < s.size(); ++k) {
      auto it = nodes_[n].next.find(static_cast<unsigned char>(s[k]));
      if (it == nodes_[n].next.end()) break;
      n = it->second;
      if (nodes_[n].pattern >= 0) {
        best = nodes_[n].pattern;
        best_end = k + 1;
      }
    }
    if (best >= 0) {
      *start = i;
      *end = best_end;
      *pattern = static_cast<size_t>(best);
      return true;
    }
  }
  return false;
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view s) const {
  auto it = map_.find(s);
  if (it == map_.end()) return std::nullopt;
  return it->second;
}

const AddedToken* AddedVocabulary::token(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

void AddedVocabulary::add_tokens(const std::vector<std::pair<AddedToken, int64_t>>& tokens, const Model& model,
                                 const Normalizer* normalizer) {
  model_vocab_size_ = model.vocab_size();
  for (const auto& [t, declared] : tokens) {
    if (t.special && !t.content.empty() && !special_set_.count(t.content)) {
      special_.push_back(t);
      special_set_.insert(t.content);
    }
  }
  for (const auto& [t, declared] : tokens) {
    if (t.content.empty()) continue;
    bool dup = false;
    for (const auto& [id, existing] : by_id_) dup |= existing.same_as(t);
    if (dup) continue;
    std::optional<int32_t> id = token_to_id(t.content);
    if (!id) id = model.token_to_id(t.content);
    int32_t new_id;
    if (id) {
      new_id = *id;
    } else {
      int32_t max_id = -1;
      for (const auto& [c, i] : map_) max_id = std::max(max_id, i);
      int32_t vs = model.vocab_size();
      new_id = max_id < 0 ? vs : ((max_id >= vs || vs == 0) ? max_id + 1 : vs);
    }
    if (declared >= 0 && declared != new_id)
      log_warn("tokenizer.json: added token \"" + t.content + "\" declares id " + std::to_string(declared) +
               " but gets id " + std::to_string(new_id) + " (as in the tokenizers library)");
    map_[t.content] = new_id;
    by_id_[new_id] = t;
    if (!special_set_.count(t.content)) added_.push_back(t);
  }
  refresh(normalizer);
}

void AddedVocabulary::refresh(const Normalizer* normalizer) {
  std::vector<std::string> raw, norm;
  split_.ids.clear();
  split_normalized_.ids.clear();
  auto visit = [&](const AddedToken& t) {
    int32_t id = map_.at(t.content);
    if (t.normalized) {
      NormalizedString ns(t.content, 0, static_cast<uint32_t>(t.content.size()));
      if (normalizer) (void)normalizer->normalize(ns);
      norm.push_back(ns.get());
      split_normalized_.ids.push_back(id);
    } else {
      raw.push_back(t.content);
      split_.ids.push_back(id);
    }
  };
  for (const auto& t : special_) visit(t);
  for (const auto& t : added_) visit(t);
  split_.trie.build(raw);
  split_normalized_.trie.build(norm);
}

namespace {

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  int len;
  return uni::is_word_char(uni::decode(s.data(), &len));
}

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t b = s.size() - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  int len;
  return uni::is_word_char(uni::decode(s.data() + b, &len));
}

// Start of the whitespace run that ends s (regex `\s*$`).
size_t space_leftmost_at_end(std::string_view s) {
  size_t i = s.size();
  while (i > 0) {
    size_t b = i - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    int len;
    if (!uni::is_whitespace(uni::decode(s.data() + b, &len))) break;
    i = b;
  }
  return i;
}

// Length of the whitespace run that starts s (regex `^\s*`).
size_t space_rightmost_at_start(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    int len;
    if (!uni::is_whitespace(uni::decode(s.data() + i, &len))) break;
    i += len;
  }
  return i;
}

}  // namespace

void AddedVocabulary::find_pieces(std::string_view sentence, bool normalized, std::vector<Piece>* out) const {
  const Matcher& m = normalized ? split_normalized_ : split_;
  std::vector<Piece>& splits = *out;
  splits.clear();
  size_t start_offset = 0, from = 0;
  size_t ms, me, pat;
  while (m.trie.find(sentence, from, &ms, &me, &pat)) {
    from = me;
    size_t start = ms, stop = me;
    int32_t id = m.ids[pat];
    const AddedToken& t = by_id_.at(id);
    if (t.single_word) {
      bool start_space = start == 0 || !ends_with_word(sentence.substr(0, start));
      bool stop_space = stop == sentence.size() || !starts_with_word(sentence.substr(stop));
      if (!stop_space || !start_space) continue;
    }
    if (t.lstrip) start = std::max(space_leftmost_at_end(sentence.substr(0, start)), start_offset);
    if (t.rstrip) stop += space_rightmost_at_start(sentence.substr(stop));
    if (start_offset < start) splits.push_back({-1, start_offset, start});
    splits.push_back({id, start, stop});
    start_offset = stop;
  }
  if (start_offset != sentence.size()) splits.push_back({-1, start_offset, sentence.size()});
}

void AddedVocabulary::split_with_indices(NormalizedString&& ns, const Matcher& m, std::vector<Split>& out) const {
  const std::string& sentence = ns.get();
  if (sentence.empty() || m.trie.empty()) {
    if (!sentence.empty()) out.push_back(Split{std::move(ns), false, {}});
    return;
  }
  std::vector<Piece> splits;
  find_pieces(sentence, &m == &split_normalized_, &splits);
  if (splits.size() == 1 && splits[0].id < 0) {
    out.push_back(Split{std::move(ns), false, {}});
    return;
  }
  for (const Piece& p : splits) {
    NormalizedString slice = ns.slice(static_cast<uint32_t>(p.start), static_cast<uint32_t>(p.end));
    if (slice.empty()) continue;
    if (p.id >= 0) {
      Split s{std::move(slice), true, {}};
      s.tokens.push_back({p.id, 0, static_cast<uint32_t>(s.normalized.size()), s.normalized.get(), true});
      out.push_back(std::move(s));
    } else {
      out.push_back(Split{std::move(slice), false, {}});
    }
  }
}

Status AddedVocabulary::extract_and_normalize(std::string_view input, const Normalizer* normalizer,
                                              PreTokenizedString& out) const {
  out.splits.clear();
  NormalizedString whole(input, 0, static_cast<uint32_t>(input.size()));
  std::vector<Split> first;
  split_with_indices(std::move(whole), split_, first);
  for (Split& s : first) {
    if (s.has_tokens) {
      out.splits.push_back(std::move(s));
      continue;
    }
    if (normalizer) LOOM_RETURN_IF_ERROR(normalizer->normalize(s.normalized));
    split_with_indices(std::move(s.normalized), split_normalized_, out.splits);
  }
  return Status::Ok();
}

}  // namespace loom::tok
