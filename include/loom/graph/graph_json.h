// A graph as JSON: symbols, the values that are not node outputs (inputs,
// parameters, constants — their tensors named, not embedded), the nodes in
// order with attributes and scopes, and the named outputs. Reading replays the
// nodes through Graph::add_node, so shape inference checks the file as it loads.
// Value ids are remapped on load (a rewritten graph has gaps); the returned map
// takes a saved id to the new one.
#pragma once

#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "loom/core/status.h"
#include "loom/graph/graph.h"

namespace loom::graph {

nlohmann::json graph_to_json(const Graph& g);

// `tensor(name, kind)` yields the tensor of a parameter or constant value.
Result<Graph> graph_from_json(const nlohmann::json& j,
                              const std::function<Result<Tensor>(const std::string& name, ValueKind kind)>& tensor,
                              std::map<ValueId, ValueId>* id_map = nullptr);

}  // namespace loom::graph
