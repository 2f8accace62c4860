#include "cli/constraint_flags.h"

#include <fstream>
#include <sstream>

#include "loom/structured/token_vocabulary.h"

namespace loom::cli {
namespace {

Result<std::string> read_file(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(flag + ": cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

void add_constraint_options(CLI::App* cmd, ConstraintFlags* f) {
  auto* schema = cmd->add_option("--json-schema", f->json_schema_file,
                                 "Constrain the output to JSON matching this JSON Schema file (docs/structured_outputs.md)");
  auto* object = cmd->add_flag("--json-object", f->json_object, "Constrain the output to a JSON object (any content)");
  cmd->add_flag("--schema-lax", f->schema_lax,
                "With --json-schema: ignore unsupported schema keywords instead of refusing them");
  auto* grammar = cmd->add_option("--grammar", f->grammar_file, "Constrain the output to this GBNF grammar file (root rule 'root')");
  auto* regex = cmd->add_option("--regex", f->regex, "Constrain the output to match this regular expression fully");
  auto* choice = cmd->add_option("--choice", f->choice, "Constrain the output to one of these strings: a,b,c")->delimiter(',');
  std::vector<CLI::Option*> all = {schema, object, grammar, regex, choice};
  for (CLI::Option* a : all)
    for (CLI::Option* b : all)
      if (a != b) a->excludes(b);
}

Result<std::shared_ptr<structured::Constraint>> compile_constraint(const ConstraintFlags& f, const Tokenizer* tokenizer) {
  using structured::ConstraintSpec;
  ConstraintSpec spec;
  std::string flag;
  if (!f.json_schema_file.empty()) {
    flag = "--json-schema";
    spec.kind = ConstraintSpec::Kind::kJsonSchema;
    LOOM_ASSIGN_OR_RETURN(spec.text, read_file(flag, f.json_schema_file));
    spec.strict = !f.schema_lax;
  } else if (f.json_object) {
    flag = "--json-object";
    spec.kind = ConstraintSpec::Kind::kJsonObject;
  } else if (!f.grammar_file.empty()) {
    flag = "--grammar";
    spec.kind = ConstraintSpec::Kind::kGrammar;
    LOOM_ASSIGN_OR_RETURN(spec.text, read_file(flag, f.grammar_file));
  } else if (!f.regex.empty()) {
    flag = "--regex";
    spec.kind = ConstraintSpec::Kind::kRegex;
    spec.text = f.regex;
  } else if (!f.choice.empty()) {
    flag = "--choice";
    spec.kind = ConstraintSpec::Kind::kChoice;
    spec.choices = f.choice;
  } else {
    if (f.schema_lax) return invalid_argument("--schema-lax needs --json-schema");
    return std::shared_ptr<structured::Constraint>();
  }
  if (!tokenizer) return invalid_argument(flag + " needs the model's tokenizer (tokenizer.json or a GGUF tokenizer)");
  auto c = structured::Constraint::compile(spec, structured::TokenVocabulary::from_tokenizer(*tokenizer));
  if (!c.ok()) {
    std::string where = flag + (spec.kind == ConstraintSpec::Kind::kJsonSchema ? " " + f.json_schema_file
                               : spec.kind == ConstraintSpec::Kind::kGrammar    ? " " + f.grammar_file
                                                                                : std::string());
    return Status(c.status().code(), where + ": " + c.status().message());
  }
  return *c;
}

}  // namespace loom::cli
