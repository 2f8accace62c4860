#include "tokenizer/normalized_string.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace loom::tok {

std::vector<char32_t> to_chars(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    int len;
    out.push_back(uni::decode(s.data() + i, &len));
    i += len;
  }
  return out;
}

NormalizedString::NormalizedString(std::string_view input, uint32_t begin, uint32_t end)
    : normalized_(input.substr(begin, end - begin)), orig_start_(begin), orig_end_(end) {
  align_.resize(end - begin);
  for (uint32_t i = begin; i < end;) {
    int len = uni::utf8_len(static_cast<unsigned char>(input[i]));
    for (int k = 0; k < len; ++k) align_[i - begin + k] = {i, i + static_cast<uint32_t>(len)};
    i += len;
  }
}

std::pair<uint32_t, uint32_t> NormalizedString::original_range(uint32_t start, uint32_t end) const {
  if (start >= end || end > align_.size()) return {orig_start_ + start, orig_start_ + end};
  return {align_[start].start, align_[end - 1].end};
}

void NormalizedString::transform_range(uint32_t n_start, uint32_t n_end, const std::vector<CharChange>& dest,
                                       size_t initial_offset) {
  n_end = std::min<uint32_t>(n_end, normalized_.size());
  n_start = std::min(n_start, n_end);
  // The chars being replaced, consumed as the changes say.
  const char* rp = normalized_.data() + n_start;
  const char* rend = normalized_.data() + n_end;
  auto next_len = [&]() -> size_t {
    if (rp >= rend) return 0;
    size_t len = uni::utf8_len(static_cast<unsigned char>(*rp));
    rp += len;
    return len;
  };
  size_t initial_removed = 0;
  for (size_t k = 0; k < initial_offset; ++k) initial_removed += next_len();

  int64_t offset = static_cast<int64_t>(initial_removed + n_start);
  std::string out;
  out.reserve(n_end - n_start + dest.size());
  std::vector<Align> new_align;
  new_align.reserve(n_end - n_start + dest.size());
  const Align start_align{orig_start_, orig_start_};
  for (const CharChange& cc : dest) {
    size_t idx = static_cast<size_t>(std::max<int64_t>(offset, 0));
    Align a;
    if (cc.change > 0) {
      a = idx < 1 ? start_align : align_[std::min(idx - 1, align_.size() - 1)];
    } else {
      a = align_.empty() ? start_align : align_[std::min(idx, align_.size() - 1)];
    }
    size_t replaced = cc.change <= 0 ? next_len() : 0;
    size_t removed = 0;
    for (int32_t k = 0; k < -cc.change; ++k) removed += next_len();
    offset += static_cast<int64_t>(replaced + removed);
    size_t before = out.size();
    uni::append_utf8(out, cc.c);
    new_align.insert(new_align.end(), out.size() - before, a);
  }
  align_.erase(align_.begin() + n_start, align_.begin() + n_end);
  align_.insert(align_.begin() + n_start, new_align.begin(), new_align.end());
  normalized_.replace(n_start, n_end - n_start, out);
}

void NormalizedString::transform(const std::vector<CharChange>& dest, size_t initial_offset) {
  // Range::Original(..) converted to the normalized side: from the first byte whose
  // alignment is not empty to the end. An empty piece is left alone.
  if (align_.empty()) {
    if (orig_end_ == orig_start_) transform_range(0, 0, dest, initial_offset);
    return;
  }
  uint32_t start = 0;
  while (start < align_.size() && align_[start].start == align_[start].end) ++start;
  transform_range(start, static_cast<uint32_t>(align_.size()), dest, initial_offset);
}

void NormalizedString::normalize_unicode(bool compose, bool compat) {
  // Decomposition as unicode-normalization-alignments does it: every input char's
  // decomposition (first char change 0, the rest +1), then each run of non-starters
  // stably sorted by combining class, changes travelling with their chars.
  // Text below U+0300 has no combining marks; it is NFC already, and ASCII is fixed by
  // every form.
  const unsigned char limit = compose && !compat ? 0xCC : 0x80;
  if (std::all_of(normalized_.begin(), normalized_.end(),
                  [limit](char ch) { return static_cast<unsigned char>(ch) < limit; }))
    return;
  std::vector<CharChange> dec;
  std::vector<uint8_t> cls;
  dec.reserve(normalized_.size() + 8);
  cls.reserve(normalized_.size() + 8);
  bool changed = false;
  size_t run_start = 0;
  auto flush_run = [&](size_t end) {
    if (end - run_start > 1) {
      std::vector<size_t> idx(end - run_start);
      for (size_t k = 0; k < idx.size(); ++k) idx[k] = run_start + k;
      std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return cls[a] < cls[b]; });
      std::vector<CharChange> d2;
      std::vector<uint8_t> c2;
      for (size_t k : idx) {
        d2.push_back(dec[k]);
        c2.push_back(cls[k]);
      }
      for (size_t k = 0; k < idx.size(); ++k) {
        if (d2[k].c != dec[run_start + k].c) changed = true;
        dec[run_start + k] = d2[k];
        cls[run_start + k] = c2[k];
      }
    }
  };
  char32_t buf[32];
  for (size_t i = 0; i < normalized_.size();) {
    int len;
    char32_t c = uni::decode(normalized_.data() + i, &len);
    i += len;
    int n = uni::decompose9(c, compat, buf);
    if (n != 1 || buf[0] != c) changed = true;
    for (int k = 0; k < n; ++k) {
      uint8_t cc = uni::ccc9(buf[k]);
      if (cc == 0) {
        flush_run(dec.size());
        run_start = dec.size() + 1;
      }
      dec.push_back({buf[k], k == 0 ? 0 : 1});
      cls.push_back(cc);
    }
  }
  flush_run(dec.size());

  if (!compose) {
    if (changed) transform(dec, 0);
    return;
  }
  // Recomposition, transcribing the crate's state machine (including where composed
  // chars' changes go: composite change = composee change + char change - 1).
  std::vector<CharChange> out;
  out.reserve(dec.size());
  std::vector<CharChange> buffer;
  bool has_composee = false;
  CharChange composee{0, 0};
  int last_ccc = -1;
  for (size_t i = 0; i < dec.size(); ++i) {
    CharChange ch = dec[i];
    int ch_class = cls[i];
    if (!has_composee) {
      if (ch_class != 0) {
        out.push_back(ch);
        continue;
      }
      composee = ch;
      has_composee = true;
      continue;
    }
    CharChange k = composee;
    if (last_ccc < 0) {
      char32_t r = uni::compose9(k.c, ch.c);
      if (r) {
        composee = {r, k.change + ch.change - 1};
        continue;
      }
      if (ch_class == 0) {
        composee = ch;
        out.push_back(k);
        continue;
      }
      buffer.push_back(ch);
      last_ccc = ch_class;
    } else {
      if (last_ccc >= ch_class) {
        if (ch_class == 0) {
          composee = ch;
          last_ccc = -1;
          out.push_back(k);
          out.insert(out.end(), buffer.begin(), buffer.end());
          buffer.clear();
          continue;
        }
        buffer.push_back(ch);
        last_ccc = ch_class;
        continue;
      }
      char32_t r = uni::compose9(k.c, ch.c);
      if (r) {
        composee = {r, k.change + ch.change - 1};
        continue;
      }
      buffer.push_back(ch);
      last_ccc = ch_class;
    }
  }
  if (has_composee) out.push_back(composee);
  out.insert(out.end(), buffer.begin(), buffer.end());
  bool same = out.size() == dec.size() && !changed;
  if (same) {
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i].c != dec[i].c || out[i].change != dec[i].change) same = false;
  }
  if (!same) transform(out, 0);
}

void NormalizedString::nfd() { normalize_unicode(false, false); }
void NormalizedString::nfkd() { normalize_unicode(false, true); }
void NormalizedString::nfc() { normalize_unicode(true, false); }
void NormalizedString::nfkc() { normalize_unicode(true, true); }

void NormalizedString::lowercase() {
  std::vector<CharChange> dest;
  dest.reserve(normalized_.size());
  bool changed = false;
  char32_t lc[3];
  for (size_t i = 0; i < normalized_.size();) {
    int len;
    char32_t c = uni::decode(normalized_.data() + i, &len);
    i += len;
    int n = uni::to_lowercase(c, lc);
    if (n != 1 || lc[0] != c) changed = true;
    for (int k = 0; k < n; ++k) dest.push_back({lc[k], k > 0 ? 1 : 0});
  }
  if (changed) transform(dest, 0);
}

void NormalizedString::prepend(std::string_view s) {
  if (normalized_.empty()) return;
  int len;
  char32_t next = uni::decode(normalized_.data(), &len);
  std::vector<CharChange> dest;
  std::vector<char32_t> cs = to_chars(s);
  for (size_t i = 0; i < cs.size(); ++i) dest.push_back({cs[i], i == 0 ? 0 : 1});
  dest.push_back({next, 1});
  transform_range(0, static_cast<uint32_t>(len), dest, 0);
}

void NormalizedString::append(std::string_view s) {
  if (normalized_.empty()) return;
  size_t b = normalized_.size() - 1;
  while (b > 0 && (static_cast<unsigned char>(normalized_[b]) & 0xC0) == 0x80) --b;
  int len;
  char32_t prev = uni::decode(normalized_.data() + b, &len);
  std::vector<CharChange> dest{{prev, 0}};
  for (char32_t c : to_chars(s)) dest.push_back({c, 1});
  transform_range(static_cast<uint32_t>(b), static_cast<uint32_t>(normalized_.size()), dest, 0);
}

void NormalizedString::replace(const MatchList& matches, std::string_view content) {
  // One pass with the effect of the library's per-match transform_range (removed chars
  // first, then each new char inserted with the alignment of the match's last byte):
  // splicing per match would be quadratic in long inputs.
  std::string out;
  std::vector<Align> out_align;
  out.reserve(normalized_.size() + matches.size() * content.size());
  out_align.reserve(out.capacity());
  uint32_t pos = 0;
  bool any = false;
  for (const auto& [range, is_match] : matches) {
    if (!is_match || range.second <= range.first || range.second > normalized_.size()) continue;
    any = true;
    out.append(normalized_, pos, range.first - pos);
    out_align.insert(out_align.end(), align_.begin() + pos, align_.begin() + range.first);
    Align a = align_[range.second - 1];
    out.append(content);
    out_align.insert(out_align.end(), content.size(), a);
    pos = range.second;
  }
  if (!any) return;
  out.append(normalized_, pos, std::string::npos);
  out_align.insert(out_align.end(), align_.begin() + pos, align_.end());
  normalized_ = std::move(out);
  align_ = std::move(out_align);
}

void NormalizedString::lrstrip(bool left, bool right) {
  std::vector<char32_t> cs = to_chars(normalized_);
  size_t leading = 0, trailing = 0;
  if (left)
    while (leading < cs.size() && uni::is_whitespace(cs[leading])) ++leading;
  if (right)
    while (trailing < cs.size() && uni::is_whitespace(cs[cs.size() - 1 - trailing])) ++trailing;
  if (leading == 0 && trailing == 0) return;
  // The library compares char indices with the byte length here; kept as is.
  int64_t len = static_cast<int64_t>(normalized_.size());
  int64_t t = static_cast<int64_t>(trailing);
  std::vector<CharChange> dest;
  for (size_t i = 0; i < cs.size(); ++i) {
    int64_t ii = static_cast<int64_t>(i);
    if (i < leading || ii >= len - t) continue;
    if (ii == len - t - 1) {
      dest.push_back({cs[i], static_cast<int32_t>(-t)});
    } else {
      dest.push_back({cs[i], 0});
    }
  }
  transform(dest, leading);
}

NormalizedString NormalizedString::slice(uint32_t start, uint32_t end) const {
  NormalizedString out;
  if (start >= end) {
    out.orig_start_ = out.orig_end_ = orig_start_;
    return out;
  }
  out.normalized_ = normalized_.substr(start, end - start);
  out.align_.assign(align_.begin() + start, align_.begin() + end);
  out.orig_start_ = align_[start].start;
  out.orig_end_ = align_[end - 1].end;
  return out;
}

MatchList apply_split_behavior(const MatchList& matches, SplitBehavior behavior) {
  using Range = std::pair<uint32_t, uint32_t>;
  std::vector<std::pair<Range, bool>> splits;  // (range, remove)
  splits.reserve(matches.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const auto& m : matches) splits.push_back({m.first, false});
      break;
    case SplitBehavior::kRemoved:
      splits.assign(matches.begin(), matches.end());
      break;
    case SplitBehavior::kContiguous: {
      bool prev = false;
      for (const auto& [r, is_match] : matches) {
        if (is_match == prev && !splits.empty()) {
          splits.back().first.second = r.second;
        } else {
          splits.push_back({r, false});
        }
        prev = is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev = false;
      for (const auto& [r, is_match] : matches) {
        if (is_match && !prev && !splits.empty()) {
          splits.back().first.second = r.second;
        } else {
          splits.push_back({r, false});
        }
        prev = is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev = false;
      for (size_t i = matches.size(); i-- > 0;) {
        const auto& [r, is_match] = matches[i];
        if (is_match && !prev && !splits.empty()) {
          splits.back().first.first = r.first;
        } else {
          splits.push_back({r, false});
        }
        prev = is_match;
      }
      std::reverse(splits.begin(), splits.end());
      break;
    }
  }
  return splits;
}

std::vector<NormalizedString> NormalizedString::split(const MatchList& matches, SplitBehavior behavior) const {
  MatchList splits = apply_split_behavior(matches, behavior);
  std::vector<NormalizedString> out;
  out.reserve(splits.size());
  for (const auto& [r, remove] : splits) {
    if (remove) continue;
    out.push_back(slice(r.first, r.second));
  }
  return out;
}

}  // namespace loom::tok
