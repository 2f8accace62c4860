#include "loom/graph/step_cost.h"

#include <map>
#include <set>
#include <vector>

namespace loom::graph {

StepCost step_cost(const Graph& g) {
  // Values computed from the rows gather_rows selects: nodes are in
  // topological order, so one forward sweep marks them.
  std::vector<bool> after_gather(g.values().size(), false);
  std::set<ValueId> whole, per_sequence_only, per_token;
  std::map<ValueId, double> row_bytes;
  for (const Node& n : g.nodes()) {
    bool downstream = n.op == "gather_rows";
    for (ValueId v : n.inputs)
      if (v != kNoValue && after_gather[static_cast<size_t>(v)]) downstream = true;
    for (ValueId v : n.outputs) after_gather[static_cast<size_t>(v)] = downstream;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const ValueId v = n.inputs[i];
      if (v == kNoValue || g.value(v).kind != ValueKind::kParameter) continue;
      const Tensor& t = g.value(v).tensor;
      if (n.op == "embedding" && i == 0 && t.rank() == 2 && t.dim(0) > 0) {
        row_bytes[v] = static_cast<double>(t.nbytes()) / static_cast<double>(t.dim(0));
        continue;
      }
      whole.insert(v);
      (downstream ? per_sequence_only : per_token).insert(v);
    }
  }
  StepCost c;
  for (ValueId v : whole) {
    const Tensor& t = g.value(v).tensor;
    c.decode_weight_bytes += static_cast<double>(t.nbytes());
    if (t.rank() < 2) continue;
    if (per_token.count(v)) c.per_token_matrix_elements += static_cast<double>(t.numel());
    else c.per_sequence_matrix_elements += static_cast<double>(t.numel());
  }
  for (const auto& [v, bytes] : row_bytes)
    if (!whole.count(v)) c.decode_weight_bytes += bytes;
  return c;
}

}  // namespace loom::graph
