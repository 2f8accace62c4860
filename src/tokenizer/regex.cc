#include "tokenizer/regex.h"

#include <oniguruma.h>

#include <mutex>

namespace loom::tok {
namespace {

void init_onig() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encs[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encs, 1);
  });
}

struct RegionDeleter {
  void operator()(OnigRegion* r) const { onig_region_free(r, 1); }
};

}  // namespace

Regex::~Regex() {
  if (re_) onig_free(static_cast<regex_t*>(re_));
}

Result<std::shared_ptr<Regex>> Regex::compile(std::string_view pattern) {
  init_onig();
  std::shared_ptr<Regex> out(new Regex());
  out->pattern_ = std::string(pattern);
  regex_t* re = nullptr;
  OnigErrorInfo einfo;
  const auto* p = reinterpret_cast<const OnigUChar*>(out->pattern_.data());
  int r = onig_new(&re, p, p + out->pattern_.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT,
                   &einfo);
  if (r != ONIG_NORMAL) {
    OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, r, &einfo);
    return parse_error("invalid regex \"" + out->pattern_ + "\": " + reinterpret_cast<char*>(msg));
  }
  out->re_ = re;
  return out;
}

std::string Regex::escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\.+*?()|[]{}^$#&-~ \t\n\r\v\f").find(c) != std::string_view::npos) {
      switch (c) {
        case '\t': out += "\\t"; continue;
        case '\n': out += "\\n"; continue;
        case '\r': out += "\\r"; continue;
        case '\v': out += "\\v"; continue;
        case '\f': out += "\\f"; continue;
        default: out.push_back('\\');
      }
    }
    out.push_back(c);
  }
  return out;
}

void Regex::find_all(std::string_view s, std::vector<std::pair<uint32_t, uint32_t>>* out) const {
  thread_local std::unique_ptr<OnigRegion, RegionDeleter> region(onig_region_new());
  auto* re = static_cast<regex_t*>(re_);
  const auto* str = reinterpret_cast<const OnigUChar*>(s.data());
  const OnigUChar* end = str + s.size();
  size_t last_end = 0;
  bool have_last_match = false;
  size_t last_match_end = 0;
  while (last_end <= s.size()) {
    onig_region_clear(region.get());
    int r = onig_search(re, str, end, str + last_end, end, region.get(), ONIG_OPTION_NONE);
    if (r < 0) break;
    size_t ms = region->beg[0], me = region->end[0];
    if (ms == me && have_last_match && last_match_end == me) {
      last_end += last_end < s.size() ? uni::utf8_len(static_cast<unsigned char>(s[last_end])) : 1;
      continue;
    }
    last_end = me;
    last_match_end = me;
    have_last_match = true;
    out->push_back({static_cast<uint32_t>(ms), static_cast<uint32_t>(me)});
  }
}

MatchList Regex::find_matches(std::string_view s) const {
  MatchList out;
  if (s.empty()) {
    out.push_back({{0, 0}, false});
    return out;
  }
  std::vector<std::pair<uint32_t, uint32_t>> found;
  find_all(s, &found);
  uint32_t prev = 0;
  out.reserve(found.size() * 2 + 1);
  for (auto [ms, me] : found) {
    if (prev != ms) out.push_back({{prev, ms}, false});
    out.push_back({{ms, me}, true});
    prev = me;
  }
  if (prev != s.size()) out.push_back({{prev, static_cast<uint32_t>(s.size())}, false});
  return out;
}

MatchList find_literal(std::string_view s, std::string_view literal) {
  MatchList out;
  if (s.empty()) {
    out.push_back({{0, 0}, false});
    return out;
  }
  if (literal.empty()) {
    out.push_back({{0, static_cast<uint32_t>(s.size())}, false});
    return out;
  }
  uint32_t prev = 0;
  size_t pos = 0;
  while ((pos = s.find(literal, pos)) != std::string_view::npos) {
    if (prev != pos) out.push_back({{prev, static_cast<uint32_t>(pos)}, false});
    out.push_back({{static_cast<uint32_t>(pos), static_cast<uint32_t>(pos + literal.size())}, true});
    pos += literal.size();
    prev = static_cast<uint32_t>(pos);
  }
  if (prev != s.size()) out.push_back({{prev, static_cast<uint32_t>(s.size())}, false});
  return out;
}

}  // namespace loom::tok
