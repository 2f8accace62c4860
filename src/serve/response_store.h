// The in-memory store behind the Responses API's previous_response_id: responses
// created with "store": true keep their conversation (Chat Completions messages, the
// reply included) until evicted, oldest first, past kMaxEntries or kMaxBytes. Nothing
// is written to disk; a restart forgets them.
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace loom::serve {

class ResponseStore {
 public:
  static constexpr size_t kMaxEntries = 1024;
  static constexpr size_t kMaxBytes = 64u << 20;

  void put(const std::string& id, nlohmann::ordered_json conversation);
  std::optional<nlohmann::ordered_json> get(const std::string& id) const;
  size_t size() const;

 private:
  struct Entry {
    nlohmann::ordered_json conversation;
    size_t bytes = 0;
  };
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  std::deque<std::string> order_;  // oldest first
  size_t bytes_ = 0;
};

}  // namespace loom::serve
