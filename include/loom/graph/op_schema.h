// What each op means: input arity, attributes, and shape/dtype inference. The
// list of built-in ops is in src/graph/op_schemas.cc (docs/ops.md explains each).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/status.h"
#include "loom/graph/graph.h"

namespace loom::graph {

struct TypedShape {
  DType dtype;
  SymShape shape;
};

struct OpSchema {
  std::string name;
  int min_inputs = 0;
  int max_inputs = 0;
  int num_outputs = 1;
  std::vector<std::string> required_attrs;
  // Infers outputs from the inputs (absent optional inputs are nullptr).
  std::function<Status(const std::vector<const Value*>& inputs, const Node& node, std::vector<TypedShape>* outputs)> infer;
  std::string summary;
};

// nullptr when the op is unknown.
const OpSchema* find_op_schema(const std::string& name);
std::vector<std::string> op_names();

}  // namespace loom::graph
