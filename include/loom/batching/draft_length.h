// How many tokens a speculative request drafts next, adapted to how many of its
// drafts the model accepted — so that text which does not repeat costs
// (almost) nothing. A verification step feeds 1 + k tokens; on a CPU at small
// batch that costs little more than one token (the weights are read once), but
// not nothing: the extra rows' attention, logits and sampling. So:
//   - every draft accepted whole: draft more next time (k + 2, up to the maximum);
//   - partly accepted: next time draft one more than was accepted;
//   - none accepted: halve k; after kMissesBeforePause such steps in a row,
//     draft nothing for a pause of steps (8, doubling on each pause that follows
//     another one without an acceptance in between, up to 256), then try again
//     with k = 1.
// Steps where the drafter finds no match cost nothing and count as neither.
#pragma once

#include <cstdint>

namespace loom::batching {

class DraftLength {
 public:
  static constexpr int kMissesBeforePause = 3;
  static constexpr int64_t kFirstPause = 8, kLongestPause = 256;

  DraftLength() = default;
  explicit DraftLength(int64_t max_tokens) : max_(max_tokens), current_(max_tokens) {}

  int64_t max_tokens() const { return max_; }
  // Tokens to draft this step; 0 while paused (or when drafting is off).
  int64_t next() const { return pause_left_ > 0 ? 0 : current_; }
  // A decode step ran without a draft verified (paused, or no match).
  void step_without_draft() {
    if (pause_left_ > 0) --pause_left_;
  }
  // A step verified `drafted` tokens, of which the first `accepted` matched.
  void record(int64_t drafted, int64_t accepted);
  // The chance a drafted token is accepted when the ones before it were, from the
  // recent drafts (accepted tokens over accepted tokens and rejections, decaying,
  // from a prior of one each).
  double acceptance() const { return (accepted_ + 1) / (accepted_ + rejected_ + 2); }

 private:
  int64_t max_ = 0;
  int64_t current_ = 0;
  int misses_ = 0;
  int64_t pause_left_ = 0;
  int64_t next_pause_ = kFirstPause;
  double accepted_ = 0, rejected_ = 0;  // decaying counts for acceptance()
};

}  // namespace loom::batching
