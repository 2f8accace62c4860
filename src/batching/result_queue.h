// The manager's output queue: outputs in delivery order, retrievable either as
// "the next one" or "the next one of request X" in O(1) — upstream re-queues
// every non-matching output, O(n) per lookup. A streamed step is queued as a mark
// into its request's StreamedOutput and copied out only when taken.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "batching/streamed_output.h"
#include "loom/batching/generation_output.h"

namespace loom::batching {

class ResultQueue {
 public:
  void push(GenerationOutput out) {
    const std::string id = out.request_id;
    push_entry(id, Entry{std::move(out), nullptr, {}});
  }
  // A streamed step of `stream`'s request: the output as it stood at `mark`.
  void push(std::shared_ptr<const StreamedOutput> stream, const StreamedOutput::Mark& mark) {
    const std::string& id = stream->current().request_id;  // set once, before the first mark
    push_entry(id, Entry{GenerationOutput(), std::move(stream), mark});
  }

  // Waits up to `timeout` seconds (forever when unset) for an output (of
  // `request_id` when given). nullopt on timeout, or once closed and empty.
  std::optional<GenerationOutput> pop(const std::optional<std::string>& request_id, std::optional<double> timeout) {
    std::unique_lock<std::mutex> lk(mu_);
    const auto deadline = timeout ? std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                                           std::chrono::duration<double>(*timeout))
                                  : std::chrono::steady_clock::time_point::max();
    // A streamed step is copied out of its request's output after the lock is released.
    auto taken = [&](std::optional<Entry> e) -> std::optional<GenerationOutput> {
      if (!e) return std::nullopt;
      lk.unlock();
      return std::move(*e).output();
    };
    while (true) {
      if (auto e = try_pop(request_id)) return taken(std::move(e));
      if (closed_) return std::nullopt;
      if (timeout) {
        if (cv_.wait_until(lk, deadline) == std::cv_status::timeout) return taken(try_pop(request_id));
      } else {
        cv_.wait(lk);
      }
    }
  }

  // Everything queued for `request_id` and for the sequences forked from it (outputs
  // whose parent_request_id it is), in delivery order: a group's sequences may all
  // have ended, and the manager forgotten the group, before anyone asks for them.
  // Looks at every request with outputs queued: few, when handlers take them.
  std::vector<GenerationOutput> take_group(const std::string& request_id) {
    std::unique_lock<std::mutex> lk(mu_);
    std::vector<std::pair<uint64_t, Entry>> taken;
    for (auto it = by_id_.begin(); it != by_id_.end();) {
      const bool mine = it->first == request_id ||
                        (!it->second.empty() && it->second.front().second.parent_request_id() == request_id);
      if (!mine) {
        ++it;
        continue;
      }
      for (auto& e : it->second) taken.push_back(std::move(e));
      held_ -= it->second.size();
      it = by_id_.erase(it);
    }
    lk.unlock();
    std::sort(taken.begin(), taken.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<GenerationOutput> out;
    out.reserve(taken.size());
    for (auto& [seq, e] : taken) out.push_back(std::move(e).output());
    return out;
  }

  bool has(const std::string& request_id) const {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = by_id_.find(request_id);
    return it != by_id_.end() && !it->second.empty();
  }

  size_t size() const {
    std::lock_guard<std::mutex> lk(mu_);
    return held_;
  }

  // Wakes every waiter; pops on an empty closed queue return at once.
  void close() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  void reopen() {
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = false;
  }

 private:
  // A whole output, or a mark into a streaming request's cumulative output.
  struct Entry {
    GenerationOutput out;
    std::shared_ptr<const StreamedOutput> stream;
    StreamedOutput::Mark mark;

    const std::string& parent_request_id() const { return stream ? stream->parent_request_id() : out.parent_request_id; }
    GenerationOutput output() && { return stream ? stream->at(mark) : std::move(out); }
  };

  void push_entry(const std::string& id, Entry e) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      const uint64_t seq = next_seq_++;
      order_.emplace_back(seq, id);
      by_id_[id].emplace_back(seq, std::move(e));
      ++held_;
      if (order_.size() > 4 * held_ + 1024) compact();  // by-id pops leave stale entries behind
    }
    cv_.notify_all();
  }

  std::optional<Entry> try_pop(const std::optional<std::string>& request_id) {
    if (request_id) {
      auto it = by_id_.find(*request_id);
      if (it == by_id_.end() || it->second.empty()) return std::nullopt;
      Entry e = std::move(it->second.front().second);
      it->second.pop_front();
      if (it->second.empty()) by_id_.erase(it);
      --held_;
      return e;  // its entry in order_ is now stale and skipped later
    }
    while (!order_.empty()) {
      auto [seq, id] = std::move(order_.front());
      order_.pop_front();
      auto it = by_id_.find(id);
      if (it == by_id_.end() || it->second.empty() || it->second.front().first != seq) continue;
      Entry e = std::move(it->second.front().second);
      it->second.pop_front();
      if (it->second.empty()) by_id_.erase(it);
      --held_;
      return e;
    }
    return std::nullopt;
  }

  void compact() {
    std::deque<std::pair<uint64_t, std::string>> live;
    for (auto& [seq, id] : order_) {
      auto it = by_id_.find(id);
      if (it == by_id_.end()) continue;
      for (const auto& e : it->second)
        if (e.first == seq) {
          live.emplace_back(seq, std::move(id));
          break;
        }
    }
    order_.swap(live);
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_seq_ = 0;
  std::deque<std::pair<uint64_t, std::string>> order_;
  std::unordered_map<std::string, std::deque<std::pair<uint64_t, Entry>>> by_id_;
  size_t held_ = 0;
  bool closed_ = false;
};

}  // namespace loom::batching
