// What a model hands to kernels/ (which may not see models/): a flat list of its
// modules and, for fusion checks, the graph the model recorded without kernels.
//
//   ModuleView view;
//   for (const Module* m : modules) {             // models/: collect_modules
//     ModuleInfo info{m->path(), m->class_name(), m->layer_name()};
//     std::vector<ParameterSpec> ps; m->collect_parameters(&ps);
//     for (auto& p : ps) info.parameters.push_back({p.name, p.shape});
//     view.modules.push_back(std::move(info));
//   }
//   view.graph = &plain_graph;                     // every node's scope = module path
#pragma once

#include <string>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/graph/graph.h"

namespace loom::kernels {

struct ParamInfo {
  std::string name;  // full checkpoint key, "model.layers.3.mlp.gate_proj.weight"
  Shape shape;
};

struct ModuleInfo {
  std::string path;        // "model.layers.3.post_attention_layernorm" ("" for the root)
  std::string class_name;  // "LlamaRMSNorm"
  std::string layer_name;  // kernel layer name, "RMSNorm" (containers: "DecoderLayer", …)
  std::vector<ParamInfo> parameters;  // every parameter in the module's subtree
  std::string device = "cpu";         // where this module runs

  const ParamInfo* find_parameter(const std::string& name) const;
};

struct ModuleView {
  std::vector<ModuleInfo> modules;
  // The graph recorded with every module's own forward. Needed only when the
  // config has fusion entries (the chain check reads it); not owned.
  const graph::Graph* graph = nullptr;

  const ModuleInfo* find(const std::string& path) const;
};

// "a.b.c" → "a.b"; "a" → "".
std::string parent_path(const std::string& path);
// True when `scope` is `path` or lies inside it ("a.b" contains "a.b.c", not "a.bc").
bool scope_within(const std::string& scope, const std::string& path);

}  // namespace loom::kernels
