#include "loom/graph/graph.h"

#include <functional>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "loom/core/status.h"
#include "loom/graph/op_schema.h"

namespace loom::graph {

namespace {
template <typename T>
const T& get_attr(const Node& n, const std::string& key) {
  auto it = n.attrs.find(key);
  if (it == n.attrs.end())
    throw Error(invalid_argument("node " + n.op + " (" + n.scope + "): missing attribute '" + key + "'"));
  const T* p = std::get_if<T>(&it->second);
  if (!p) throw Error(invalid_argument("node " + n.op + " (" + n.scope + "): attribute '" + key + "' has the wrong type"));
  return *p;
}
}  // namespace

int64_t Node::attr_int(const std::string& key) const { return get_attr<int64_t>(*this, key); }
int64_t Node::attr_int(const std::string& key, int64_t fallback) const {
  return has_attr(key) ? attr_int(key) : fallback;
}
double Node::attr_float(const std::string& key) const {
  auto it = attrs.find(key);
  if (it != attrs.end())
    if (const int64_t* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  return get_attr<double>(*this, key);
}
double Node::attr_float(const std::string& key, double fallback) const {
  return has_attr(key) ? attr_float(key) : fallback;
}
const std::string& Node::attr_str(const std::string& key) const { return get_attr<std::string>(*this, key); }
std::string Node::attr_str(const std::string& key, const std::string& fallback) const {
  return has_attr(key) ? attr_str(key) : fallback;
}
const std::vector<int64_t>& Node::attr_ints(const std::string& key) const {
  return get_attr<std::vector<int64_t>>(*this, key);
}

const std::vector<double>& Node::attr_floats(const std::string& key) const {
  return get_attr<std::vector<double>>(*this, key);
}

int Graph::add_symbol(const std::string& name) {
  const int existing = symbol(name);
  if (existing >= 0) return existing;
  symbols_.push_back(name);
  return static_cast<int>(symbols_.size()) - 1;
}

int Graph::symbol(const std::string& name) const {
  for (size_t i = 0; i < symbols_.size(); ++i)
    if (symbols_[i] == name) return static_cast<int>(i);
  return -1;
}

ValueId Graph::new_value(ValueKind kind, DType dtype, SymShape shape, std::string name) {
  Value v;
  v.id = static_cast<ValueId>(values_.size());
  v.kind = kind;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.name = std::move(name);
  values_.push_back(std::move(v));
  return values_.back().id;
}

ValueId Graph::add_input(const std::string& name, DType dtype, SymShape shape) {
  if (input(name) != kNoValue) throw Error(invalid_argument("graph input '" + name + "' added twice"));
  ValueId id = new_value(ValueKind::kInput, dtype, std::move(shape), name);
  inputs_.push_back(id);
  return id;
}

ValueId Graph::add_parameter(const std::string& name, const Tensor& tensor) {
  SymShape shape;
  for (int64_t d : tensor.shape()) shape.push_back(Dim::fixed(d));
  ValueId id = new_value(ValueKind::kParameter, tensor.dtype(), std::move(shape), name);
  values_[static_cast<size_t>(id)].tensor = tensor;
  return id;
}

ValueId Graph::add_constant(const std::string& name, const Tensor& tensor) {
  ValueId id = add_parameter(name, tensor);
  values_[static_cast<size_t>(id)].kind = ValueKind::kConstant;
  return id;
}

std::vector<ValueId> Graph::add_node(const std::string& op, std::vector<ValueId> inputs,
                                     std::map<std::string, AttrValue> attrs, const std::string& scope) {
  const OpSchema* schema = find_op_schema(op);
  const std::string where = "op '" + op + "'" + (scope.empty() ? "" : " in " + scope);
  if (!schema) throw Error(unsupported("unknown " + where));
  const int n = static_cast<int>(inputs.size());
  if (n < schema->min_inputs || n > schema->max_inputs)
    throw Error(invalid_argument(where + ": takes " + std::to_string(schema->min_inputs) + ".." +
                                 std::to_string(schema->max_inputs) + " inputs, got " + std::to_string(n)));
  for (const auto& key : schema->required_attrs)
    if (!attrs.count(key)) throw Error(invalid_argument(where + ": missing attribute '" + key + "'"));
  std::vector<const Value*> in;
  for (ValueId v : inputs) {
    if (v != kNoValue && (v < 0 || static_cast<size_t>(v) >= values_.size()))
      throw Error(internal_error(where + ": input value " + std::to_string(v) + " does not exist"));
    in.push_back(v == kNoValue ? nullptr : &values_[static_cast<size_t>(v)]);
  }
  Node node;
  node.id = static_cast<NodeId>(nodes_.size());
  node.op = op;
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  node.scope = scope;
  std::vector<TypedShape> outs;
  Status st = schema->infer(in, node, &outs);
  if (!st.ok()) throw Error(st.with_context(where));
  for (auto& o : outs) {
    ValueId id = new_value(ValueKind::kNode, o.dtype, std::move(o.shape), "");
    values_[static_cast<size_t>(id)].producer = node.id;
    node.outputs.push_back(id);
  }
  nodes_.push_back(std::move(node));
  return nodes_.back().outputs;
}

void Graph::mark_output(const std::string& name, ValueId v) { outputs_.emplace_back(name, v); }

ValueId Graph::input(const std::string& name) const {
  for (ValueId v : inputs_)
    if (values_[static_cast<size_t>(v)].name == name) return v;
  return kNoValue;
}

ValueId Graph::output(const std::string& name) const {
  for (const auto& [n, v] : outputs_)
    if (n == name) return v;
  return kNoValue;
}

std::vector<ValueId> Graph::parameters() const {
  std::vector<ValueId> out;
  for (const auto& v : values_)
    if (v.kind == ValueKind::kParameter) out.push_back(v.id);
  return out;
}

void Graph::replace_uses(ValueId from, ValueId to) {
  for (auto& n : nodes_)
    for (auto& in : n.inputs)
      if (in == from) in = to;
  for (auto& [name, v] : outputs_)
    if (v == from) v = to;
}

int Graph::remove_dead_nodes() {
  std::vector<bool> live_value(values_.size(), false);
  for (const auto& [name, v] : outputs_) live_value[static_cast<size_t>(v)] = true;
  std::vector<bool> keep(nodes_.size(), false);
  for (size_t i = nodes_.size(); i-- > 0;) {
    const Node& n = nodes_[i];
    bool used = false;
    for (ValueId o : n.outputs) used = used || live_value[static_cast<size_t>(o)];
    if (!used) continue;
    keep[i] = true;
    for (ValueId in : n.inputs)
      if (in != kNoValue) live_value[static_cast<size_t>(in)] = true;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (keep[i]) kept.push_back(std::move(nodes_[i]));
  const int removed = static_cast<int>(nodes_.size() - kept.size());
  nodes_ = std::move(kept);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    nodes_[i].id = static_cast<NodeId>(i);
    for (ValueId o : nodes_[i].outputs) values_[static_cast<size_t>(o)].producer = static_cast<NodeId>(i);
  }
  return removed;
}

void Graph::sort_topologically() {
  const size_t n = nodes_.size();
  std::vector<int> pending(n, 0);                 // inputs not yet produced
  std::vector<std::vector<size_t>> consumers(n);  // by producing node
  for (size_t i = 0; i < n; ++i)
    for (ValueId in : nodes_[i].inputs) {
      if (in == kNoValue) continue;
      const Value& v = values_[static_cast<size_t>(in)];
      if (v.kind != ValueKind::kNode) continue;
      ++pending[i];
      consumers[static_cast<size_t>(v.producer)].push_back(i);
    }
  // Kahn's algorithm, always taking the lowest ready index: an already valid
  // order is kept as it is.
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  for (size_t i = 0; i < n; ++i)
    if (pending[i] == 0) ready.push(i);
  std::vector<size_t> order;
  order.reserve(n);
  while (!ready.empty()) {
    const size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (size_t c : consumers[i])
      if (--pending[c] == 0) ready.push(c);
  }
  if (order.size() != n)
    throw Error(internal_error("graph: the nodes form a cycle (" + std::to_string(n - order.size()) +
                               " nodes never become ready)"));
  std::vector<Node> sorted;
  sorted.reserve(n);
  for (size_t i : order) sorted.push_back(std::move(nodes_[i]));
  nodes_ = std::move(sorted);
  for (size_t i = 0; i < n; ++i) {
    nodes_[i].id = static_cast<NodeId>(i);
    for (ValueId o : nodes_[i].outputs) values_[static_cast<size_t>(o)].producer = static_cast<NodeId>(i);
  }
}

std::string Graph::dim_to_string(const Dim& d) const {
  if (d.is_static()) return std::to_string(d.value);
  return d.symbol < static_cast<int>(symbols_.size()) ? symbols_[static_cast<size_t>(d.symbol)] : "?";
}

std::string Graph::shape_to_string(const SymShape& s) const {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + dim_to_string(s[i]);
  return out + "]";
}

std::string Graph::to_string() const {
  std::ostringstream os;
  auto val = [&](ValueId v) {
    if (v == kNoValue) return std::string("_");
    const Value& x = values_[static_cast<size_t>(v)];
    return "%" + std::to_string(v) + (x.name.empty() ? "" : "(" + x.name + ")");
  };
  for (ValueId v : inputs_) {
    const Value& x = value(v);
    os << "input " << val(v) << ": " << dtype_name(x.dtype) << shape_to_string(x.shape) << "\n";
  }
  for (const auto& n : nodes_) {
    os << "  ";
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const Value& o = value(n.outputs[i]);
      os << (i ? ", " : "") << val(n.outputs[i]) << ": " << dtype_name(o.dtype) << shape_to_string(o.shape);
    }
    os << " = " << n.op << "(";
    for (size_t i = 0; i < n.inputs.size(); ++i) os << (i ? ", " : "") << val(n.inputs[i]);
    os << ")";
    if (!n.scope.empty()) os << "  # " << n.scope;
    os << "\n";
  }
  for (const auto& [name, v] : outputs_) os << "output " << name << " = " << val(v) << "\n";
  return os.str();
}

}  // namespace loom::graph
