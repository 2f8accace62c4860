// The architecture registry: model_type (or an `architectures` entry) → a
// builder turning a ModelConfig into a module tree. Adding an architecture is one
// entry in src/models/architectures.cc.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/io/model_config.h"
#include "loom/models/decoder.h"
#include "loom/weights/weight_rule.h"

namespace loom::models {

struct Architecture {
  std::string model_type;                // "llama"
  std::string class_name;                // "LlamaForCausalLM"
  // Fills in what the Transformers config class defaults for this model_type
  // when ModelConfig's generic parse cannot know it (unset: nothing to do).
  std::function<Status(ModelConfig&)> resolve_config;
  std::function<Result<std::unique_ptr<CausalLM>>(const ModelConfig&)> build;
  // How the checkpoint's tensors map to the module tree's parameters (empty:
  // every parameter is stored under its own name, as in the Llama family). The
  // same rules, reversed, write the checkpoint back (save_pretrained).
  std::function<WeightRules(const ModelConfig&)> weight_rules;
};

const std::vector<Architecture>& architectures();
// By model_type first, then by the config's `architectures` list; the error
// names the config's model_type and lists what is supported.
Result<const Architecture*> find_architecture(const ModelConfig& config);

}  // namespace loom::models
