#include "loom/kernels/fusion_chain.h"

#include <algorithm>
#include <set>

#include "loom/kernels/module_view.h"

namespace loom::kernels {

namespace {

using graph::Graph;
using graph::NodeId;
using graph::ValueId;

std::string value_label(const Graph& g, ValueId v) {
  const auto& val = g.value(v);
  std::string s = "%";
  s += std::to_string(v);
  if (val.producer >= 0) {
    const auto& n = g.node(val.producer);
    s += " (" + n.op + " in " + (n.scope.empty() ? std::string("<root>") : n.scope) + ")";
  }
  return s;
}

}  // namespace

Result<ChainInfo> check_chain(const Graph& g, const std::string& parent, const std::vector<std::string>& children) {
  const size_t n = children.size();
  auto err = [&](size_t i, const std::string& what) {
    return invalid_argument("children of " + (parent.empty() ? std::string("<root>") : parent) +
                            " do not form a chain: " + children[i] + " " + what);
  };
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      if (i != j && scope_within(children[i], children[j])) return err(i, "lies inside " + children[j]);

  // Which child (if any) each node belongs to; readers of every value.
  std::vector<int> owner(g.nodes().size(), -1);
  std::vector<std::vector<NodeId>> readers(g.values().size());
  std::set<ValueId> graph_outputs;
  for (const auto& [name, v] : g.outputs()) graph_outputs.insert(v);
  std::vector<int> node_count(n, 0);
  for (const auto& node : g.nodes()) {
    for (size_t c = 0; c < n; ++c)
      if (scope_within(node.scope, children[c])) {
        owner[static_cast<size_t>(node.id)] = static_cast<int>(c);
        ++node_count[c];
        break;
      }
    for (ValueId in : node.inputs)
      if (in != graph::kNoValue) readers[static_cast<size_t>(in)].push_back(node.id);
  }
  auto is_data = [&](ValueId v) { return g.value(v).kind == graph::ValueKind::kNode; };
  auto owner_of_value = [&](ValueId v) { return is_data(v) ? owner[static_cast<size_t>(g.value(v).producer)] : -1; };

  ChainInfo info;
  std::vector<ValueId> inputs(n, graph::kNoValue);
  for (size_t c = 0; c < n; ++c) {
    if (node_count[c] == 0) return err(c, "recorded no ops");
    std::vector<ValueId> ins, outs;
    for (const auto& node : g.nodes()) {
      if (owner[static_cast<size_t>(node.id)] != static_cast<int>(c)) continue;
      for (ValueId in : node.inputs)
        if (in != graph::kNoValue && is_data(in) && owner_of_value(in) != static_cast<int>(c) &&
            std::find(ins.begin(), ins.end(), in) == ins.end())
          ins.push_back(in);
      for (ValueId out : node.outputs) {
        bool escapes = graph_outputs.count(out) != 0;
        for (NodeId r : readers[static_cast<size_t>(out)]) escapes |= owner[static_cast<size_t>(r)] != static_cast<int>(c);
        if (escapes) outs.push_back(out);
      }
    }
    if (ins.size() != 1) return err(c, "reads " + std::to_string(ins.size()) + " tensors from outside itself, not one");
    if (outs.size() != 1)
      return err(c, "has " + std::to_string(outs.size()) + " outputs read outside itself, not one");
    inputs[c] = ins[0];
    info.child_outputs.push_back(outs[0]);
  }
  info.input = inputs[0];
  info.output = info.child_outputs.back();

  for (size_t c = 0; c + 1 < n; ++c) {
    const ValueId out = info.child_outputs[c];
    const ValueId next_in = inputs[c + 1];
    ChainLink link;
    if (next_in != out) {
      const auto& producer = g.node(g.value(next_in).producer);
      const bool residual_add = producer.op == "add" && producer.scope == parent && producer.inputs.size() == 2 &&
                                (producer.inputs[0] == out || producer.inputs[1] == out);
      if (!residual_add)
        return err(c + 1, "reads " + value_label(g, next_in) + ", which is neither the output of " + children[c] +
                              " nor a residual add of it in " + parent);
      link.residual = true;
      link.add_node = producer.id;
      link.residual_value = producer.inputs[0] == out ? producer.inputs[1] : producer.inputs[0];
      if (link.residual_value == out) return err(c + 1, "reads a residual add of " + children[c] + " with itself");
    }
    for (NodeId r : readers[static_cast<size_t>(out)]) {
      const bool ok = link.residual ? r == link.add_node : owner[static_cast<size_t>(r)] == static_cast<int>(c + 1);
      if (!ok) {
        const auto& rn = g.node(r);
        return err(c, "output " + value_label(g, out) + " is also read by " + rn.op + " in " +
                          (rn.scope.empty() ? std::string("<root>") : rn.scope) + ", so fusing would hide it");
      }
    }
    if (graph_outputs.count(out))
      return err(c, "output " + value_label(g, out) + " is a graph output, so fusing would hide it");
    info.links.push_back(link);
  }
  return info;
}

}  // namespace loom::kernels
