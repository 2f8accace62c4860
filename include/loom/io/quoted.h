// 'name': how error messages of the io and weights layers quote a name.
#pragma once

#include <string>
#include <string_view>

namespace loom::io {

inline std::string squote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('\'');
  out.append(s);
  out.push_back('\'');
  return out;
}

}  // namespace loom::io
