// Whether a fusion's children form a chain in the graph their parent recorded,
// so one fused kernel can stand in for them. Upstream fuses without checking.
//
// Definition. A node belongs to child c when its scope is c's path or lies
// under it. Data are values produced by nodes; parameters, constants and graph
// inputs (positions, …) are context any module may read and are ignored. For
// children c1..cn (in the fusion's order) of parent P:
//   1. every child recorded at least one node;
//   2. every child reads exactly one data value produced outside itself (its
//      input) and exactly one of its values is read outside it or is a graph
//      output (its output): single tensor in, single tensor out;
//   3. for i ≥ 2, the input of ci is either
//        - the output of c(i-1) (a direct link), or
//        - the result of an `add` node recorded in P's own scope (not in a
//          child) with the output of c(i-1) as one operand (a residual link;
//          the other operand is the residual);
//   4. for i < n, the output of ci is read by nothing but c(i+1), or by
//      nothing but that residual `add` (fusion removes it, so nobody else may
//      see it). A residual add's own result may have other readers: a fused
//      kernel absorbing the add returns it too (the fused add+norm shape).
// Order matters: (MLP, RMSNorm) on a decoder layer is rejected by rule 3.
#pragma once

#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/graph/graph.h"

namespace loom::kernels {

struct ChainLink {
  bool residual = false;                      // false: direct
  graph::NodeId add_node = -1;                // residual: the add in the parent
  graph::ValueId residual_value = graph::kNoValue;
};

struct ChainInfo {
  graph::ValueId input = graph::kNoValue;    // what the first child reads
  graph::ValueId output = graph::kNoValue;   // what the last child produces
  std::vector<graph::ValueId> child_outputs; // one per child
  std::vector<ChainLink> links;              // n - 1, links[i] joins child i and i + 1
};

// kInvalidArgument naming the child and the rule it breaks.
Result<ChainInfo> check_chain(const graph::Graph& graph, const std::string& parent,
                              const std::vector<std::string>& children);

}  // namespace loom::kernels
