// A config.json key that is missing or null: what the architectures' config
// adapters treat as "not given".
#pragma once

#include <nlohmann/json.hpp>

namespace loom::models {

inline bool absent(const nlohmann::json& j, const char* key) { return !j.contains(key) || j.at(key).is_null(); }

}  // namespace loom::models
