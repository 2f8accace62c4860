// A parsed Jinja template, rendered as jinja2 would render it inside
// Transformers' chat-template environment (ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks and the loopcontrols extension; `tojson` is
// Transformers' json.dumps version). Parse once, render many times; rendering
// is const and may run concurrently.
#pragma once

#include <memory>
#include <string>

#include "loom/core/status.h"
#include "loom/tokenizer/jinja/value.h"

namespace loom::jinja {

struct TemplateOptions {
  // Transformers' settings; jinja2's own defaults are all false.
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

class Template {
 public:
  // Syntax errors (and unknown tags, filters or tests) name the construct and
  // the line/column.
  static Result<Template> parse(const std::string& source, TemplateOptions options = {});

  // `context` is a dict of top-level variables (Undefined/none means no
  // variables). Besides them the template sees jinja2's globals range(),
  // dict(), namespace(), cycler() and joiner(). Runtime errors name the line.
  Result<std::string> render(const Value& context) const;

  struct Impl;

 private:
  explicit Template(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace loom::jinja
