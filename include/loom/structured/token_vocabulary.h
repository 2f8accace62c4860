// A tokenizer's vocabulary as byte strings in a trie, built once per tokenizer: the
// mask of a grammar state is one preorder walk of the trie that advances the automaton
// a byte per edge and skips every subtree the automaton rejects.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace loom {
class Tokenizer;
}

namespace loom::structured {

class TokenVocabulary {
 public:
  // bytes[id]: the token's text bytes, nullopt (or empty) for ids constrained text may
  // never contain (special tokens).
  explicit TokenVocabulary(std::vector<std::optional<std::string>> bytes);
  static std::shared_ptr<const TokenVocabulary> from_tokenizer(const Tokenizer& tokenizer);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::optional<std::string>& bytes(int32_t id) const { return bytes_[id]; }

  // Preorder: a node's subtree is [index, subtree_end).
  struct TrieNode {
    uint8_t byte;
    uint16_t depth;         // 1 for a first byte
    uint32_t subtree_end;
    uint32_t first_token, token_count;  // into token_ids()
  };
  const std::vector<TrieNode>& nodes() const { return nodes_; }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  size_t max_depth() const { return max_depth_; }

 private:
  std::vector<std::optional<std::string>> bytes_;
  std::vector<TrieNode> nodes_;
  std::vector<int32_t> token_ids_;
  size_t max_depth_ = 0;
};

}  // namespace loom::structured
