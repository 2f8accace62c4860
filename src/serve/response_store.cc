#include "serve/response_store.h"

namespace loom::serve {

void ResponseStore::put(const std::string& id, nlohmann::ordered_json conversation) {
  const size_t bytes = conversation.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).size() + id.size();
  std::lock_guard<std::mutex> lk(mu_);
  if (bytes > kMaxBytes) return;  // larger than the whole store: not kept
  if (auto it = entries_.find(id); it != entries_.end()) {
    bytes_ -= it->second.bytes;
    entries_.erase(it);
    for (auto o = order_.begin(); o != order_.end(); ++o)
      if (*o == id) {
        order_.erase(o);
        break;
      }
  }
  while (!order_.empty() && (entries_.size() + 1 > kMaxEntries || bytes_ + bytes > kMaxBytes)) {
    auto it = entries_.find(order_.front());
    if (it != entries_.end()) {
      bytes_ -= it->second.bytes;
      entries_.erase(it);
    }
    order_.pop_front();
  }
  entries_[id] = Entry{std::move(conversation), bytes};
  order_.push_back(id);
  bytes_ += bytes;
}

std::optional<nlohmann::ordered_json> ResponseStore::get(const std::string& id) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.conversation;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return entries_.size();
}

}  // namespace loom::serve
