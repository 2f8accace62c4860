// The one pattern syntax for tensor and module names in loom: weight rules
// (conversion mappings, kernel layouts), the GGUF name mapping and kernel-config
// module paths all use it; there are no regexes.
//
// Dotted names where `*` matches a run of one or more characters without a dot
// and captures it (`model.layers.*.mlp.gate_proj.weight`, `experts.*.w1.weight`,
// `*_proj`); a segment that is only `*` is exactly one whole segment. As in
// Transformers, a rule's pattern need not name the whole key: search() finds a
// dot-aligned run of segments anywhere in it (the leftmost one), and the rest of
// the key (prefix, suffix) carries over into the target name, so `mlp.gate_proj`
// covers both `model.layers.3.mlp.gate_proj.weight` and its `.bias`. A leading `^`
// pins the match to the key's start, a trailing `$` to its end; match() takes the
// whole key (what a kernel-config module path means). In a rule's target, the
// stars are filled with the source's captures in order.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/status.h"

namespace loom {

struct PatternMatch {
  std::string prefix;                 // segments before the match ("" if none)
  std::vector<std::string> captures;  // one per `*`, in order
  std::string suffix;                 // segments after the match
};

class WeightPattern {
 public:
  // kInvalidArgument for an empty pattern or an empty segment ("a..b").
  static Result<WeightPattern> parse(std::string_view text);

  const std::string& text() const { return text_; }
  int num_stars() const { return num_stars_; }

  // Leftmost dot-aligned match in `key`.
  std::optional<PatternMatch> search(std::string_view key) const;
  // The captures when the pattern covers all of `key` (anchors or not).
  std::optional<std::vector<std::string>> match(std::string_view key) const;
  // The pattern (without anchors) with its first captures.size() stars replaced.
  std::string substitute(const std::vector<std::string>& captures) const;

 private:
  std::string text_;
  std::vector<std::string> segments_;
  bool anchor_start_ = false;
  bool anchor_end_ = false;
  int num_stars_ = 0;
};

// prefix + "." + body + "." + suffix, leaving out empty parts.
std::string join_key(std::string_view prefix, std::string_view body, std::string_view suffix);

// Orders dotted keys with numeric segments numerically ("e.2" < "e.10"), like
// Transformers' dot_natural_key.
bool natural_less(std::string_view a, std::string_view b);

}  // namespace loom
