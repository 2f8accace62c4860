// token ↔ id tables shared by the models.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace loom::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept {
    // FNV-1a: short keys, and good enough spread for vocabularies.
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

class Vocab {
 public:
  // Later duplicates of a token overwrite earlier ones (a HashMap built by insertion).
  void add(std::string token, int32_t id) {
    if (id >= static_cast<int32_t>(by_id_.size())) {
      by_id_.resize(id + 1);
      present_.resize(id + 1, 0);
    }
    by_id_[id] = token;
    present_[id] = 1;
    map_[std::move(token)] = id;
  }
  void add_if_absent(std::string token, int32_t id) {
    if (id >= static_cast<int32_t>(by_id_.size())) {
      by_id_.resize(id + 1);
      present_.resize(id + 1, 0);
    }
    by_id_[id] = token;
    present_[id] = 1;
    map_.emplace(std::move(token), id);
  }
  std::optional<int32_t> find(std::string_view token) const {
    auto it = map_.find(token);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  const std::string* token(int32_t id) const {
    if (id < 0 || id >= static_cast<int32_t>(by_id_.size()) || !present_[id]) return nullptr;
    return &by_id_[id];
  }
  size_t size() const { return map_.size(); }
  int32_t id_limit() const { return static_cast<int32_t>(by_id_.size()); }
  void reserve(size_t n) { map_.reserve(n); }

 private:
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> map_;
  std::vector<std::string> by_id_;
  std::vector<uint8_t> present_;
};

}  // namespace loom::tok
