// Access to the `tokenizers` oracle outputs written by scripts/install-test-oracles.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace loom::test {

inline std::string oracle_dir() {
  if (const char* env = std::getenv("LOOM_TOKENIZER_ORACLES")) return env;
  return std::string(LOOM_SOURCE_DIR) + "/.cache/tokenizer-oracles";
}

// Loads ORACLE_DIR/<file>; on failure records a test failure telling how to create it.
inline bool load_oracle_json(const std::string& file, nlohmann::json* out) {
  std::string path = oracle_dir() + "/" + file;
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    ADD_FAILURE() << "missing tokenizer oracle output " << path
                  << "\n  run scripts/install-test-oracles (or scripts/install-deps --test) to create it";
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    *out = nlohmann::json::parse(ss.str());
  } catch (const std::exception& e) {
    ADD_FAILURE() << path << ": " << e.what() << "\n  rerun scripts/install-test-oracles";
    return false;
  }
  return true;
}

}  // namespace loom::test
