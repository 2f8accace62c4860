// Request JSON parsed in time linear in its size. nlohmann's ordered_json keeps
// an object's keys in order in a vector and looks each new key up in it, so an
// object of n keys costs n²/2 string comparisons (200,000 keys in any field of
// a 2.7 MB body: 50 s of a core). This builds the same value with one hash
// index per object while it is open.
#pragma once

#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace loom::serve {

// The value `text` holds, as nlohmann::ordered_json::parse gives it (keys in
// order, a repeated key's last value in its first place), or nullopt when it is
// not valid JSON.
std::optional<nlohmann::ordered_json> parse_json(std::string_view text);

}  // namespace loom::serve
