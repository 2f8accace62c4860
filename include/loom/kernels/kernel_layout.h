// The `<Name>Layout` pattern: a kernel that keeps its own parameters (renamed,
// merged) declares them per model instance, with the weight rules that produce
// them from the model's parameter names. The rules are plain values the model's
// load appends to its own (weights/weight_rule.h); nothing is registered
// globally, so a layout never leaks into another model.
//
// Rules are anchored to the instance ("^model.layers.3.mlp.gate_proj"), so a
// fusion selecting some layers converts only those layers' weights. They are
// written against the model's own parameter names (after the architecture's
// renamings).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/core/tensor.h"
#include "loom/kernels/module_view.h"
#include "loom/weights/weight_rule.h"

namespace loom::kernels {

struct LayoutRequest {
  // The module the kernel replaces, or the fused children in chain order.
  std::vector<const ModuleInfo*> modules;
  // Which of them holds the parameters: the module the kernel runs at (the
  // first, or the last for a residual-tail fusion, kernel_spec.h).
  size_t slot = 0;
};

struct LayoutParam {
  std::string name;        // full name, under the slot
  Shape shape;
  std::string dtype_from;  // an original parameter whose dtype it takes ("" = keep the checkpoint's)
};

struct LayoutInstance {
  std::string slot;                      // module path holding the parameters (modules[LayoutRequest::slot])
  std::vector<LayoutParam> parameters;   // what the kernel reads
  std::vector<std::string> replaced;     // original parameters they stand in for
  WeightRules rules;                     // original names → `parameters`

  std::string describe() const;
};

using KernelLayout = std::function<Result<LayoutInstance>(const LayoutRequest&)>;

}  // namespace loom::kernels
