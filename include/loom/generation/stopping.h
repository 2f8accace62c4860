// When a generation ends and what text it shows: EOS ids, max_new_tokens, and stop
// strings. Stop strings are matched on the decoded text as it streams; text that
// could still turn into a stop string is held back, so a streamed stop string is
// never shown in part.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::generation {

enum class FinishReason { kNone, kEos, kLength, kStopString, kCancelled, kError };
// OpenAI-style names: "stop" for EOS and stop strings, "length", "cancelled", "error".
const char* finish_reason_name(FinishReason r);

class StopStringMatcher {
 public:
  StopStringMatcher() = default;
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Adds newly decoded text and appends to `shown` the text now safe to show.
  // Allocates nothing once its buffer has grown to the longest stop string.
  void push(std::string_view piece, std::string& shown);
  // At the end of generation: appends whatever was held back (nothing after a stop).
  void flush(std::string& shown);
  // The same, returning the text.
  std::string push(std::string_view piece);
  std::string flush();
  // True once a stop string has appeared; the shown text ends just before it.
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string pending_;  // decoded but not yet shown
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace loom::generation
