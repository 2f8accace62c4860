// Shared helpers of the structured tests: compile a grammar, run text through it.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "loom/structured/grammar.h"
#include "loom/structured/grammar_matcher.h"

namespace loom::structured::test {

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string source_path(const std::string& rel) { return std::string(LOOM_SOURCE_DIR) + "/" + rel; }

inline std::shared_ptr<CompiledGrammar> compile(Result<Grammar> g) {
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  if (!g.ok()) return nullptr;
  return std::make_shared<CompiledGrammar>(std::move(g).value());
}

}  // namespace loom::structured::test
