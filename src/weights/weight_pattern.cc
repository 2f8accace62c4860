#include "loom/weights/weight_pattern.h"

#include <algorithm>

namespace loom {
namespace {

std::vector<std::string_view> split_dots(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    out.push_back(s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return out;
}

// Wildcard match of one segment; each `*` takes one or more characters.
bool match_segment(std::string_view pat, std::string_view seg, std::vector<std::string>* caps) {
  if (pat.empty()) return seg.empty();
  if (pat[0] != '*') {
    if (seg.empty() || seg[0] != pat[0]) return false;
    return match_segment(pat.substr(1), seg.substr(1), caps);
  }
  // Shortest capture first, so `*_proj` style patterns bind the minimal run.
  for (size_t n = 1; n <= seg.size(); ++n) {
    const size_t mark = caps->size();
    caps->emplace_back(seg.substr(0, n));
    if (match_segment(pat.substr(1), seg.substr(n), caps)) return true;
    caps->resize(mark);
  }
  return false;
}

std::string join(const std::vector<std::string_view>& parts, size_t begin, size_t end) {
  std::string s;
  for (size_t i = begin; i < end; ++i) {
    if (i > begin) s += '.';
    s += parts[i];
  }
  return s;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Result<WeightPattern> WeightPattern::parse(std::string_view text) {
  WeightPattern p;
  p.text_ = std::string(text);
  std::string_view body = text;
  if (!body.empty() && body.front() == '^') {
    p.anchor_start_ = true;
    body.remove_prefix(1);
  }
  if (!body.empty() && body.back() == '$') {
    p.anchor_end_ = true;
    body.remove_suffix(1);
  }
  if (body.empty()) return invalid_argument("weight pattern '" + p.text_ + "' is empty");
  for (std::string_view seg : split_dots(body)) {
    if (seg.empty()) return invalid_argument("weight pattern '" + p.text_ + "' has an empty segment");
    if (seg.find("**") != std::string_view::npos)
      return invalid_argument("weight pattern '" + p.text_ + "': adjacent stars are ambiguous");
    p.num_stars_ += static_cast<int>(std::count(seg.begin(), seg.end(), '*'));
    p.segments_.emplace_back(seg);
  }
  return p;
}

std::optional<PatternMatch> WeightPattern::search(std::string_view key) const {
  const std::vector<std::string_view> parts = split_dots(key);
  const size_t n = segments_.size();
  if (parts.size() < n) return std::nullopt;
  for (size_t off = 0; off + n <= parts.size(); ++off) {
    if (anchor_start_ && off > 0) break;
    if (anchor_end_ && off + n != parts.size()) continue;
    std::vector<std::string> caps;
    bool ok = true;
    for (size_t i = 0; ok && i < n; ++i) ok = match_segment(segments_[i], parts[off + i], &caps);
    if (ok) return PatternMatch{join(parts, 0, off), std::move(caps), join(parts, off + n, parts.size())};
  }
  return std::nullopt;
}

std::optional<std::vector<std::string>> WeightPattern::match(std::string_view key) const {
  const std::vector<std::string_view> parts = split_dots(key);
  if (parts.size() != segments_.size()) return std::nullopt;
  std::vector<std::string> caps;
  for (size_t i = 0; i < parts.size(); ++i)
    if (!match_segment(segments_[i], parts[i], &caps)) return std::nullopt;
  return caps;
}

std::string WeightPattern::substitute(const std::vector<std::string>& captures) const {
  std::string out;
  size_t k = 0;
  for (size_t i = 0; i < segments_.size(); ++i) {
    if (i) out += '.';
    for (char c : segments_[i]) {
      if (c == '*' && k < captures.size())
        out += captures[k++];
      else
        out += c;
    }
  }
  return out;
}

std::string join_key(std::string_view prefix, std::string_view body, std::string_view suffix) {
  std::string s(prefix);
  if (!body.empty()) {
    if (!s.empty()) s += '.';
    s += body;
  }
  if (!suffix.empty()) {
    if (!s.empty()) s += '.';
    s += suffix;
  }
  return s;
}

bool natural_less(std::string_view a, std::string_view b) {
  const auto pa = split_dots(a), pb = split_dots(b);
  for (size_t i = 0; i < pa.size() && i < pb.size(); ++i) {
    if (pa[i] == pb[i]) continue;
    if (all_digits(pa[i]) && all_digits(pb[i])) {
      if (pa[i].size() != pb[i].size()) return pa[i].size() < pb[i].size();  // no leading zeros in practice
      return pa[i] < pb[i];
    }
    return pa[i] < pb[i];
  }
  return pa.size() < pb.size();
}

}  // namespace loom
