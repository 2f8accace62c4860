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
  // Rewrites a config.json whose fields use other names (GPT-2's n_embd, n_layer, …)
  // into ModelConfig's before it is parsed (unset: nothing to do).
  std::function<Status(nlohmann::json&)> adapt_config_json;
  // Fills in what the Transformers config class defaults for this model_type
  // when ModelConfig's generic parse cannot know it (unset: nothing to do).
  std::function<Status(ModelConfig&)> resolve_config;
  std::function<Result<std::unique_ptr<CausalLM>>(const ModelConfig&)> build;
  // How the checkpoint's tensors map to the module tree's parameters (empty:
  // every parameter is stored under its own name, as in the Llama family). The
  // same rules, reversed, write the checkpoint back (save_pretrained).
  std::function<WeightRules(const ModelConfig&)> weight_rules;
  // Checkpoint tensors (after no rule consumed them) that are expected to be
  // unused and need no warning: a tied lm_head, GPT-2's causal-mask buffers.
  std::function<bool(const std::string& name, const ModelConfig&)> expected_unused;
};

const std::vector<Architecture>& architectures();
// By model_type only (for adapting config.json before it is parsed); null if none.
const Architecture* find_architecture_by_type(const std::string& model_type);
// By model_type first, then by the config's `architectures` list; the error
// names the config's model_type and lists what is supported.
Result<const Architecture*> find_architecture(const ModelConfig& config);

}  // namespace loom::models
