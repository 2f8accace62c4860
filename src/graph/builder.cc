#include "loom/graph/builder.h"

namespace loom::graph {

ValueId GraphBuilder::param(const std::string& name) {
  auto it = param_values_.find(name);
  if (it != param_values_.end()) return it->second;
  ValueId v = g_->add_parameter(name, params_(name));
  param_values_.emplace(name, v);
  return v;
}

ValueId GraphBuilder::op(const std::string& op, std::vector<ValueId> inputs, std::map<std::string, AttrValue> attrs) {
  return g_->add_node(op, std::move(inputs), std::move(attrs), scope_).at(0);
}

}  // namespace loom::graph
