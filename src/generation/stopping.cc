#include "loom/generation/stopping.h"

#include <algorithm>

namespace loom::generation {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kEos: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kStopString: return "stop";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "none";
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
  for (const auto& s : stops_) max_len_ = std::max(max_len_, s.size());
}

void StopStringMatcher::push(std::string_view piece, std::string& shown) {
  if (stopped_) return;
  pending_.append(piece);
  if (stops_.empty()) {
    shown.append(pending_);
    pending_.clear();
    return;
  }
  // Earliest occurrence of any stop string wins.
  size_t best = std::string::npos;
  const std::string* first = nullptr;
  for (const auto& s : stops_) {
    const size_t pos = pending_.find(s);
    if (pos != std::string::npos && pos < best) {
      best = pos;
      first = &s;
    }
  }
  if (first) {
    stopped_ = true;
    matched_ = *first;
    shown.append(pending_, 0, best);
    pending_.clear();
    return;
  }
  // Hold back the longest suffix that is a prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t upto = std::min(s.size() - 1, pending_.size());
    for (size_t len = upto; len > hold; --len)
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
  }
  shown.append(pending_, 0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
}

void StopStringMatcher::flush(std::string& shown) {
  if (!stopped_) shown.append(pending_);
  pending_.clear();
}

std::string StopStringMatcher::push(std::string_view piece) {
  std::string shown;
  push(piece, shown);
  return shown;
}

std::string StopStringMatcher::flush() {
  std::string shown;
  flush(shown);
  return shown;
}

}  // namespace loom::generation
