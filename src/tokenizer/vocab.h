// token ↔ id tables shared by the models: an open-addressing hash table over the token
// strings (vocabularies reach 260k entries and are probed once per character).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::tok {

inline uint64_t hash_bytes(const char* p, size_t n) {
  auto mix = [](uint64_t a) {
    a ^= a >> 32;
    a *= 0x9E3779B97F4A7C15ull;
    a ^= a >> 29;
    return a;
  };
  uint64_t h = 0x243F6A8885A308D3ull ^ (n * 0xFF51AFD7ED558CCDull);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = mix(h ^ (v * 0xBF58476D1CE4E5B9ull));
    p += 8;
    n -= 8;
  }
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  return mix(h ^ (v * 0x94D049BB133111EBull) ^ n);
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return static_cast<size_t>(hash_bytes(s.data(), s.size())); }
};

class Vocab {
 public:
  // A later duplicate of a token overwrites the earlier id (a map built by insertion).
  void add(std::string token, int32_t id) { insert(std::move(token), id, true); }
  void add_if_absent(std::string token, int32_t id) { insert(std::move(token), id, false); }

  std::optional<int32_t> find(std::string_view token) const {
    if (slots_.empty()) return std::nullopt;
    const size_t mask = slots_.size() - 1;
    const uint64_t h = hash_bytes(token.data(), token.size());
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const uint64_t slot = slots_[i];
      if (slot == kEmpty) return std::nullopt;
      // The tag spares a look at the string (another cache miss) for most other tokens.
      const auto k = static_cast<uint32_t>(slot);
      if ((slot >> 32) == tag_of(h) && strings_[k] == token) return ids_[k];
    }
  }
  const std::string* token(int32_t id) const {
    if (id < 0 || id >= static_cast<int32_t>(id_to_str_.size()) || id_to_str_[id] < 0) return nullptr;
    return &strings_[id_to_str_[id]];
  }
  size_t size() const { return strings_.size(); }
  int32_t id_limit() const { return static_cast<int32_t>(id_to_str_.size()); }
  void reserve(size_t n) {
    strings_.reserve(n);
    ids_.reserve(n);
    rehash(n * 2);
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  // A slot: the hash's high 32 bits (never all ones for a used slot: tag_of clears one) and the string index.
  static uint64_t tag_of(uint64_t h) { return (h >> 32) & 0x7fffffffu; }
  static uint64_t slot_of(uint64_t h, size_t k) { return tag_of(h) << 32 | static_cast<uint32_t>(k); }

  void rehash(size_t want) {
    size_t cap = 16;
    while (cap < want) cap <<= 1;
    if (cap <= slots_.size()) return;
    slots_.assign(cap, kEmpty);
    size_t mask = cap - 1;
    for (size_t k = 0; k < strings_.size(); ++k) {
      const uint64_t h = hash_bytes(strings_[k].data(), strings_[k].size());
      size_t i = h & mask;
      while (slots_[i] != kEmpty) i = (i + 1) & mask;
      slots_[i] = slot_of(h, k);
    }
  }
  void insert(std::string token, int32_t id, bool overwrite) {
    if ((strings_.size() + 1) * 2 > slots_.size()) rehash((strings_.size() + 1) * 2);
    if (id >= static_cast<int32_t>(id_to_str_.size())) id_to_str_.resize(id + 1, -1);
    size_t mask = slots_.size() - 1;
    const uint64_t h = hash_bytes(token.data(), token.size());
    size_t i = h & mask;
    for (; slots_[i] != kEmpty; i = (i + 1) & mask) {
      const auto k = static_cast<int32_t>(static_cast<uint32_t>(slots_[i]));
      if ((slots_[i] >> 32) != tag_of(h) || strings_[k] != token) continue;
      if (overwrite) {
        if (id_to_str_[ids_[k]] == k) id_to_str_[ids_[k]] = -1;
        ids_[k] = id;
        id_to_str_[id] = k;
      }
      return;
    }
    int32_t k = static_cast<int32_t>(strings_.size());
    strings_.push_back(std::move(token));
    ids_.push_back(id);
    slots_[i] = slot_of(h, k);
    id_to_str_[id] = k;
  }

  std::vector<uint64_t> slots_;     // slot_of(hash, string index), or kEmpty
  std::vector<std::string> strings_;
  std::vector<int32_t> ids_;        // id of strings_[k]
  std::vector<int32_t> id_to_str_;  // string index of an id or -1
};

}  // namespace loom::tok
