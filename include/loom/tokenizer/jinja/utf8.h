// UTF-8 helpers for Python str semantics: templates index, slice, measure and
// case-map strings by code point, not byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::jinja::utf8 {

// Decodes UTF-8; invalid bytes decode as U+FFFD so a bad message never crashes.
std::vector<char32_t> decode(std::string_view s);
void append(std::string& out, char32_t cp);
std::string encode(const std::vector<char32_t>& cps);
size_t length(std::string_view s);

// Python's str.isspace() for one code point.
bool is_space(char32_t cp);
// Simple (one-to-one) case mapping; covers ASCII, Latin-1, Latin Extended-A,
// Greek and Cyrillic. Other scripts are returned unchanged.
char32_t to_upper(char32_t cp);
char32_t to_lower(char32_t cp);
bool is_cased_letter(char32_t cp);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
// Python str.title() and str.capitalize().
std::string title(std::string_view s);
std::string capitalize(std::string_view s);

}  // namespace loom::jinja::utf8
