// A piece of the input under normalization, with the byte-exact alignment of every
// normalized byte to the original text — the model of `tokenizers`' NormalizedString,
// whose transform rules decide the offsets the library reports, quirks included.
//
// Alignments are absolute offsets into the whole input (the library keeps them relative
// to the piece plus a shift; the arithmetic is the same).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom::tok {

struct Align {
  uint32_t start = 0, end = 0;
  bool operator==(const Align& o) const { return start == o.start && end == o.end; }
};

// One output char of a transformation and how it relates to the input (the library's
// `(char, isize)` protocol): 0 replaces the next input char, +1 is inserted, -N replaces
// the next input char and removes the N after it.
struct CharChange {
  char32_t c;
  int32_t change;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// (byte range, is_match) covering a string contiguously.
using MatchList = std::vector<std::pair<std::pair<uint32_t, uint32_t>, bool>>;

// The library's split behaviors over a MatchList: (range, remove) pieces.
MatchList apply_split_behavior(const MatchList& matches, SplitBehavior behavior);

class NormalizedString {
 public:
  NormalizedString() = default;
  // The piece input[begin, end) before any normalization.
  NormalizedString(std::string_view input, uint32_t begin, uint32_t end);

  const std::string& get() const { return normalized_; }
  bool empty() const { return normalized_.empty(); }
  size_t size() const { return normalized_.size(); }
  uint32_t original_start() const { return orig_start_; }
  uint32_t original_end() const { return orig_end_; }
  const std::vector<Align>& alignments() const { return align_; }

  // Original byte range (absolute) of normalized bytes [start, end): the library's
  // convert_offsets(Range::Normalized) + shift. An empty range maps to itself shifted.
  std::pair<uint32_t, uint32_t> original_range(uint32_t start, uint32_t end) const;

  // Replaces normalized bytes [n_start, n_end) by `dest` (see CharChange);
  // `initial_offset` chars at the start of the range are removed.
  void transform_range(uint32_t n_start, uint32_t n_end, const std::vector<CharChange>& dest, size_t initial_offset);
  // The whole string (the library's transform(), i.e. Range::Original(..)).
  void transform(const std::vector<CharChange>& dest, size_t initial_offset);

  void nfd();
  void nfkd();
  void nfc();
  void nfkc();
  void lowercase();
  template <typename Keep>
  void filter(Keep keep);
  template <typename Map>
  void map(Map fn);
  void prepend(std::string_view s);
  void append(std::string_view s);
  // Replaces each match by `content`.
  void replace(const MatchList& matches, std::string_view content);
  void lstrip() { lrstrip(true, false); }
  void rstrip() { lrstrip(false, true); }
  void strip() { lrstrip(true, true); }
  void lrstrip(bool left, bool right);

  // Sub-piece of normalized bytes [start, end) (must be char boundaries).
  NormalizedString slice(uint32_t start, uint32_t end) const;
  // Splits along `matches` (from a Pattern over get()) per `behavior`.
  std::vector<NormalizedString> split(const MatchList& matches, SplitBehavior behavior) const;

 private:
  void normalize_unicode(bool compose, bool compat);

  std::string normalized_;
  std::vector<Align> align_;
  uint32_t orig_start_ = 0, orig_end_ = 0;
};

// Decodes `s` into code points.
std::vector<char32_t> to_chars(std::string_view s);

template <typename Keep>
void NormalizedString::filter(Keep keep) {
  // The library walks backwards so a removed run is charged to the kept char before it.
  std::vector<char32_t> cs = to_chars(normalized_);
  std::vector<CharChange> rev;
  rev.reserve(cs.size());
  int32_t removed = 0;
  for (size_t i = cs.size(); i-- > 0;) {
    if (keep(cs[i])) {
      rev.push_back({cs[i], removed > 0 ? -removed : 0});
      removed = 0;
    } else {
      ++removed;
    }
  }
  std::vector<CharChange> dest(rev.rbegin(), rev.rend());
  transform(dest, static_cast<size_t>(removed));
}

template <typename Map>
void NormalizedString::map(Map fn) {
  std::vector<char32_t> cs = to_chars(normalized_);
  std::vector<CharChange> dest;
  dest.reserve(cs.size());
  for (char32_t c : cs) dest.push_back({fn(c), 0});
  transform(dest, 0);
}

}  // namespace loom::tok
