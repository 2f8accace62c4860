// One call for the common case: open a checkpoint, compile the plan for this
// model instance's rules and parameters, warn about unused tensors, and load
// every parameter. Keep the result's plan to save the model back later in the
// checkpoint's original layout (plan.save(params_from(params), out)).
#pragma once

#include <map>
#include <string>

#include "loom/core/status.h"
#include "loom/core/tensor.h"
#include "loom/io/checkpoint.h"
#include "loom/weights/conversion_plan.h"
#include "loom/weights/weight_rule.h"

namespace loom {

struct LoadedWeights {
  Checkpoint checkpoint;  // views in `params` keep its mappings alive by themselves
  ConversionPlan plan;
  std::map<std::string, Tensor> params;
  LoadStats stats;
};

// `path`: a checkpoint directory or .safetensors file (see Checkpoint::open).
// `what` names the model in warnings and errors ("LlamaForCausalLM").
Result<LoadedWeights> load_weights(const std::string& path, const WeightRules& rules, const ExpectedParams& expected,
                                   const std::string& what, const CompileOptions& options = {});

}  // namespace loom
