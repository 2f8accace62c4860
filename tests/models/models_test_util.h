// Shared by the models tests: where the parity fixtures are (scripts/make-fixtures,
// run by ctest), and the variants its index lists.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::models_test {

inline std::filesystem::path fixtures_dir() {
  if (const char* env = std::getenv("LOOM_FIXTURES_DIR")) return env;
  return std::filesystem::path(LOOM_BINARY_DIR) / "fixtures";
}

inline std::filesystem::path fixture(const std::string& name) { return fixtures_dir() / name; }

// Every variant in fixtures/index.json (empty when the fixtures were not made).
inline std::vector<std::string> variant_names() {
  std::ifstream in(fixtures_dir() / "index.json");
  std::vector<std::string> names;
  if (!in) return names;
  const nlohmann::json index = nlohmann::json::parse(in);
  for (const auto& v : index["variants"]) names.push_back(v["name"].get<std::string>());
  return names;
}

}  // namespace loom::models_test
