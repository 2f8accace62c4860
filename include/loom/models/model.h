// A loaded checkpoint: its config, its module tree and its weights (views into
// the mmap'd safetensors), checked against each other before anything runs.
#pragma once

#include <memory>
#include <string>

#include "loom/core/status.h"
#include "loom/graph/graph.h"
#include "loom/io/checkpoint.h"
#include "loom/io/model_config.h"
#include "loom/models/decoder.h"

namespace loom::models {

class Model {
 public:
  // Reads config.json and the safetensors in `dir`. Errors name the file and
  // the tensor: unsupported model_type, missing tensors, wrong shapes. Tensors
  // the architecture does not use are reported with a warning.
  static Result<std::shared_ptr<Model>> load(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  const CausalLM& module() const { return *module_; }
  const Checkpoint& checkpoint() const { return *checkpoint_; }

  // The graph of one forward step over a packed batch (see step_io names).
  // Built once; every caller shares it.
  std::shared_ptr<const graph::Graph> step_graph() const { return graph_; }

  int64_t vocab_size() const { return config_.vocab_size; }
  int num_layers() const { return static_cast<int>(config_.num_hidden_layers); }
  int64_t num_kv_heads() const { return config_.num_key_value_heads; }
  int64_t head_dim() const { return config_.head_dim; }

 private:
  Model() = default;
  std::string dir_;
  ModelConfig config_;
  std::unique_ptr<CausalLM> module_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::shared_ptr<const graph::Graph> graph_;
};

}  // namespace loom::models
