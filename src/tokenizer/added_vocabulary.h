// Added tokens (special or not) matched in the text before the model runs, with the
// library's lstrip/rstrip/single_word/normalized rules. Matching is leftmost-longest over
// a byte trie of all token contents.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/components.h"
#include "tokenizer/vocab.h"

namespace loom::tok {

struct AddedToken {
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
  bool same_as(const AddedToken& o) const {
    return content == o.content && single_word == o.single_word && lstrip == o.lstrip && rstrip == o.rstrip &&
           normalized == o.normalized && special == o.special;
  }
};

// Leftmost-longest multi-pattern matcher.
class TokenTrie {
 public:
  void build(const std::vector<std::string>& patterns);
  bool empty() const { return patterns_ == 0; }
  // Next match at or after `from`: (start, end, pattern index).
  bool find(std::string_view s, size_t from, size_t* start, size_t* end, size_t* pattern) const;

 private:
  struct Node {
    std::unordered_map<unsigned char, uint32_t> next;
    int32_t pattern = -1;
  };
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
  size_t patterns_ = 0;
};

class AddedVocabulary {
 public:
  // Adds tokens the way the library loads `added_tokens` (ids taken from the model vocab
  // or assigned after it; the JSON ids only checked).
  void add_tokens(const std::vector<std::pair<AddedToken, int64_t>>& tokens, const Model& model,
                  const Normalizer* normalizer);

  std::optional<int32_t> token_to_id(std::string_view s) const;
  const AddedToken* token(int32_t id) const;
  bool is_special(std::string_view content) const { return special_set_.count(std::string(content)) > 0; }
  size_t size() const { return map_.size(); }
  const std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>& map() const { return map_; }

  // Where added tokens match in `sentence` (the raw-text trie or the normalized-text
  // one): pieces covering the sentence, id -1 for plain text.
  struct Piece {
    int32_t id;
    size_t start, end;
  };
  void find_pieces(std::string_view sentence, bool normalized, std::vector<Piece>* out) const;
  bool has_normalized_tokens() const { return !split_normalized_.trie.empty(); }

  // Splits the input on added tokens and normalizes the rest (extract_and_normalize).
  Status extract_and_normalize(std::string_view input, const Normalizer* normalizer, PreTokenizedString& out) const;

 private:
  struct Matcher {
    TokenTrie trie;
    std::vector<int32_t> ids;
  };
  void refresh(const Normalizer* normalizer);
  void split_with_indices(NormalizedString&& s, const Matcher& m, std::vector<Split>& out) const;

  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> map_;
  std::unordered_map<int32_t, AddedToken> by_id_;
  std::vector<AddedToken> added_, special_;
  std::unordered_set<std::string> special_set_;
  Matcher split_, split_normalized_;
  int32_t model_vocab_size_ = 0;
};

}  // namespace loom::tok
