#include "loom/graph/builder.h"

#include <map>
#include <memory>

#include "loom/graph/op_schema.h"
#include "loom/graph/patch_point.h"

namespace loom::graph {
namespace {

using OpPoint = PatchPoint<OpBuilderSig>;

// Never destroyed: the patch registry keeps pointers to the points.
const std::map<std::string, std::unique_ptr<OpPoint>>& op_points() {
  static const auto* points = [] {
    auto* m = new std::map<std::string, std::unique_ptr<OpPoint>>();
    for (const std::string& name : op_names()) {
      m->emplace(name, std::make_unique<OpPoint>(op_patch_path(name), [name](GraphBuilder& b, std::vector<ValueId> in,
                                                                                 std::map<std::string, AttrValue> attrs) {
                   return b.record(name, std::move(in), std::move(attrs));
                 }));
    }
    return m;
  }();
  return *points;
}

}  // namespace

std::string op_patch_path(const std::string& op) { return "ops." + op; }

ValueId GraphBuilder::param(const std::string& name) {
  auto it = param_values_.find(name);
  if (it != param_values_.end()) return it->second;
  ValueId v = g_->add_parameter(name, params_(name));
  param_values_.emplace(name, v);
  return v;
}

ValueId GraphBuilder::op(const std::string& op, std::vector<ValueId> inputs, std::map<std::string, AttrValue> attrs) {
  const auto& points = op_points();
  auto it = points.find(op);
  if (it == points.end()) return record(op, std::move(inputs), std::move(attrs));  // unknown: add_node names it
  return (*it->second)(*this, std::move(inputs), std::move(attrs));
}

ValueId GraphBuilder::record(const std::string& op, std::vector<ValueId> inputs, std::map<std::string, AttrValue> attrs) {
  return g_->add_node(op, std::move(inputs), std::move(attrs), scope_).at(0);
}

}  // namespace loom::graph
