#include "loom/structured/token_vocabulary.h"

#include <algorithm>

#include "loom/tokenizer/token_bytes.h"

namespace loom::structured {

TokenVocabulary::TokenVocabulary(std::vector<std::optional<std::string>> bytes) : bytes_(std::move(bytes)) {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < size(); ++id) {
    if (bytes_[id] && !bytes_[id]->empty()) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return *bytes_[a] != *bytes_[b] ? *bytes_[a] < *bytes_[b] : a < b;
  });
  // path[d] = node index of the current path at depth d+1.
  std::vector<uint32_t> path;
  const std::string* prev = nullptr;
  std::vector<std::vector<int32_t>> tokens_at;
  for (int32_t id : order) {
    const std::string& s = *bytes_[id];
    size_t common = 0;
    if (prev) {
      while (common < s.size() && common < prev->size() && common < path.size() && s[common] == (*prev)[common]) ++common;
    }
    for (size_t d = common; d < path.size(); ++d) nodes_[path[d]].subtree_end = static_cast<uint32_t>(nodes_.size());
    path.resize(common);
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back({static_cast<uint8_t>(s[d]), static_cast<uint16_t>(d + 1), 0, 0, 0});
      tokens_at.emplace_back();
    }
    tokens_at[path.back()].push_back(id);
    max_depth_ = std::max(max_depth_, s.size());
    prev = &s;
  }
  for (uint32_t p : path) nodes_[p].subtree_end = static_cast<uint32_t>(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    nodes_[i].first_token = static_cast<uint32_t>(token_ids_.size());
    nodes_[i].token_count = static_cast<uint32_t>(tokens_at[i].size());
    token_ids_.insert(token_ids_.end(), tokens_at[i].begin(), tokens_at[i].end());
  }
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer) {
  return std::make_shared<TokenVocabulary>(token_byte_strings(tokenizer));
}

}  // namespace loom::structured
