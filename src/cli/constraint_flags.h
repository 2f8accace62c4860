// `--json-schema FILE | --json-object | --grammar FILE | --regex RE | --choice a,b,c`:
// one output constraint for `loom generate` (and later `loom chat`).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "loom/structured/constraint.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::cli {

struct ConstraintFlags {
  std::string json_schema_file;
  bool json_object = false;
  bool schema_lax = false;
  std::string grammar_file;
  std::string regex;
  std::vector<std::string> choice;
};

void add_constraint_options(CLI::App* cmd, ConstraintFlags* f);

// Null without a constraint flag. Errors name the flag (and the file, line, keyword).
Result<std::shared_ptr<structured::Constraint>> compile_constraint(const ConstraintFlags& f, const Tokenizer* tokenizer);

}  // namespace loom::cli
