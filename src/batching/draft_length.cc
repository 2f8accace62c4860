#include "loom/batching/draft_length.h"

#include <algorithm>

namespace loom::batching {

void DraftLength::record(int64_t drafted, int64_t accepted) {
  if (drafted <= 0 || max_ <= 0) return;
  accepted_ = 0.9 * accepted_ + static_cast<double>(accepted);
  rejected_ = 0.9 * rejected_ + (accepted < drafted ? 1.0 : 0.0);
  if (accepted > 0) {
    misses_ = 0;
    next_pause_ = kFirstPause;
    current_ = accepted == drafted ? std::min(max_, drafted + 2) : std::min(max_, accepted + 1);
    return;
  }
  current_ = std::max<int64_t>(1, drafted / 2);
  if (++misses_ < kMissesBeforePause) return;
  misses_ = 0;
  pause_left_ = next_pause_;
  next_pause_ = std::min(kLongestPause, 2 * next_pause_);
  current_ = 1;
}

}  // namespace loom::batching
