// The typed SSA IR every consumer shares: values with a dtype and a symbolic shape,
// nodes naming an op (see op_schema.h) with attributes. Model code records into it
// through GraphBuilder; the runtime executes it; exporters rewrite and lower it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/tensor.h"
#include "loom/graph/dim.h"

namespace loom::graph {

using ValueId = int32_t;
using NodeId = int32_t;
constexpr ValueId kNoValue = -1;

using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

enum class ValueKind : uint8_t {
  kInput,      // fed per run (input_ids, positions, …)
  kParameter,  // a model weight, bound to a Tensor by name
  kConstant,   // a tensor owned by the graph
  kNode,       // produced by a node
};

struct Value {
  ValueId id = kNoValue;
  ValueKind kind = ValueKind::kNode;
  DType dtype = DType::kF32;
  SymShape shape;
  std::string name;       // input name, parameter key ("model.norm.weight"), or debug name
  NodeId producer = -1;   // for kNode
  Tensor tensor;          // for kParameter and kConstant
};

struct Node {
  NodeId id = -1;
  std::string op;
  std::vector<ValueId> inputs;   // kNoValue marks an absent optional input
  std::vector<ValueId> outputs;
  std::map<std::string, AttrValue> attrs;
  std::string scope;             // module path that recorded it ("model.layers.3.mlp")

  int64_t attr_int(const std::string& key) const;
  int64_t attr_int(const std::string& key, int64_t fallback) const;
  double attr_float(const std::string& key) const;
  double attr_float(const std::string& key, double fallback) const;
  const std::string& attr_str(const std::string& key) const;
  std::string attr_str(const std::string& key, const std::string& fallback) const;
  const std::vector<int64_t>& attr_ints(const std::string& key) const;
  const std::vector<double>& attr_floats(const std::string& key) const;
  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
};

class Graph {
 public:
  // Symbols
  int add_symbol(const std::string& name);
  int symbol(const std::string& name) const;  // -1 if absent
  const std::vector<std::string>& symbols() const { return symbols_; }

  ValueId add_input(const std::string& name, DType dtype, SymShape shape);
  ValueId add_parameter(const std::string& name, const Tensor& tensor);
  ValueId add_constant(const std::string& name, const Tensor& tensor);
  // Adds a node; output values get dtype/shape from the op's shape inference.
  // Throws loom::Error naming the op and scope when inputs do not fit its schema.
  std::vector<ValueId> add_node(const std::string& op, std::vector<ValueId> inputs,
                                std::map<std::string, AttrValue> attrs, const std::string& scope = "");
  void mark_output(const std::string& name, ValueId v);

  const Value& value(ValueId v) const { return values_.at(static_cast<size_t>(v)); }
  Value& mutable_value(ValueId v) { return values_.at(static_cast<size_t>(v)); }
  const Node& node(NodeId n) const { return nodes_.at(static_cast<size_t>(n)); }
  Node& mutable_node(NodeId n) { return nodes_.at(static_cast<size_t>(n)); }
  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<std::pair<std::string, ValueId>>& outputs() const { return outputs_; }
  ValueId input(const std::string& name) const;    // kNoValue if absent
  ValueId output(const std::string& name) const;   // kNoValue if absent
  std::vector<ValueId> parameters() const;

  // Replaces every use of `from` (node inputs and graph outputs) by `to`.
  void replace_uses(ValueId from, ValueId to);
  // Drops nodes whose outputs reach no graph output and renumbers the rest (node
  // ids are positions; value ids never change). Returns how many were removed.
  // Needs the nodes in topological order (sort_topologically after rewrites).
  int remove_dead_nodes();
  // Reorders nodes so each comes after the producers of its inputs (a rewrite
  // that appends replacement nodes leaves them after their consumers), keeping
  // the existing order wherever it is already valid, and renumbers them. Throws
  // loom::Error on a cycle.
  void sort_topologically();

  std::string to_string() const;   // human-readable listing, one node a line
  std::string dim_to_string(const Dim& d) const;
  std::string shape_to_string(const SymShape& s) const;

 private:
  ValueId new_value(ValueKind kind, DType dtype, SymShape shape, std::string name);

  std::vector<std::string> symbols_;
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> inputs_;
  std::vector<std::pair<std::string, ValueId>> outputs_;
};

}  // namespace loom::graph
