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

namespace loom::models {

struct Architecture {
  std::string model_type;                // "llama"
  std::string class_name;                // "LlamaForCausalLM"
  std::function<Result<std::unique_ptr<CausalLM>>(const ModelConfig&)> build;
};

const std::vector<Architecture>& architectures();
// By model_type first, then by the config's `architectures` list; the error
// names the config's model_type and lists what is supported.
Result<const Architecture*> find_architecture(const ModelConfig& config);

}  // namespace loom::models
