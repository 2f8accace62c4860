// Records ops into a Graph on behalf of modules. Modules call these helpers with
// their own path as scope; parameters are resolved by name once (tied weights
// share one value).
#pragma once

#include <functional>
#include <string>
#include <unordered_map>

#include "loom/graph/graph.h"

namespace loom::graph {

class GraphBuilder;

// The op builders' patch points, one per op schema, path "ops.<op>" (e.g.
// "ops.softcap", "ops.where"): what upstream's exporters patch as torch.where
// or F.scaled_dot_product_attention. Created with the first recorded op.
using OpBuilderSig = ValueId(GraphBuilder&, std::vector<ValueId>, std::map<std::string, AttrValue>);
std::string op_patch_path(const std::string& op);

class GraphBuilder {
 public:
  using ParameterSource = std::function<Tensor(const std::string& name)>;

  GraphBuilder(Graph* graph, ParameterSource params) : g_(graph), params_(std::move(params)) {}

  Graph& graph() { return *g_; }

  // The parameter value for a checkpoint key, added on first use.
  ValueId param(const std::string& name);
  // Records one node of `op` through the op's patch point "ops.<op>" (see
  // OpBuilderSig below), so an export's op-level patch can replace it.
  ValueId op(const std::string& op, std::vector<ValueId> inputs, std::map<std::string, AttrValue> attrs = {});
  // Records the node itself, past any patch: what an op's original does, and
  // what a replacement calls to record the same op without re-entering itself.
  ValueId record(const std::string& op, std::vector<ValueId> inputs, std::map<std::string, AttrValue> attrs = {});

  // RAII scope: nodes recorded inside carry this module path.
  class Scope {
   public:
    Scope(GraphBuilder& b, const std::string& path) : b_(b), saved_(b.scope_) { b_.scope_ = path; }
    ~Scope() { b_.scope_ = saved_; }
   private:
    GraphBuilder& b_;
    std::string saved_;
  };
  const std::string& scope() const { return scope_; }

 private:
  Graph* g_;
  ParameterSource params_;
  std::unordered_map<std::string, ValueId> param_values_;
  std::string scope_;
};

}  // namespace loom::graph
