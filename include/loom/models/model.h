// A loaded checkpoint: its config, its module tree and its weights, checked
// against each other before anything runs. Weights arrive through the weights
// layer: the architecture's conversion rules are compiled against the
// checkpoint's headers and the module tree's parameters into a plan, validated
// before any tensor byte is read, then streamed (identity groups stay views
// into the mmap'd safetensors). The plan is kept, so save_pretrained can write
// the checkpoint back in its original layout.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <memory>
#include <string>

#include "loom/core/status.h"
#include "loom/core/tensor.h"
#include "loom/graph/graph.h"
#include "loom/io/model_config.h"  // config.json is read where the architecture registry reads it
#include "loom/kernels/kernel_config.h"
#include "loom/kernels/kernel_plan.h"
#include "loom/kernels/module_view.h"
#include "loom/models/decoder.h"
#include "loom/weights/conversion_plan.h"
#include "loom/weights/quantization_recipe.h"
#include "loom/weights/weight_rule.h"

namespace loom::models {

// How to load one model instance. Everything here applies to that instance
// only: a KernelConfig's layouts rename/merge this model's parameters and
// nothing else's.
struct LoadOptions {
  // Empty (the default): every module runs its own forward, exactly as load(dir),
  // unless builtin_fusions is on.
  kernels::KernelConfig kernel_config;
  // With an empty kernel_config: load with loom's built-in fusions that fit this
  // model (models/builtin_fusions.h) — the front ends' default. Off under
  // tensor parallelism and for quantized weights (a GGUF file's blocks, or
  // `quantize`), where merged projections measured slower. The library's default
  // stays off: load(dir) records the checkpoint's own modules, as exporters and
  // tests expect.
  bool builtin_fusions = false;
  std::vector<std::string> plugin_dirs;          // plugins here need trust_remote_code
  std::vector<std::string> trusted_plugin_dirs;
  // Kernels added to this load's registry next to the built-in ones (an
  // embedding application's own, or a test's). A kernel that is selected must
  // still be one loom can record.
  std::vector<kernels::KernelSpec> extra_kernels;
  const kernels::CpuFeatures* cpu = nullptr;     // nullptr: the host's
  // Quantize the weights as they load (weights/quantization_recipe.h); unset:
  // run them as stored (a GGUF file's quantized tensors stay quantized).
  std::optional<QuantizationRecipe> quantize;
  // Load only this rank's shard (models/tensor_parallel.h): the module tree is
  // split, each parameter is cut as it streams from the checkpoint, and the
  // step graph holds the collectives. Not with a kernel_config.
  TensorParallel tensor_parallel;
};

class Model {
 public:
  // Reads config.json and the safetensors in `dir`. Errors name the file and
  // the tensor: unsupported model_type, missing tensors, wrong shapes or
  // dtypes, rules that do not fit. Tensors the architecture does not use are
  // reported with a warning.
  static Result<std::shared_ptr<Model>> load(const std::string& dir);
  // With a KernelConfig: builds the module tree, records the plain graph,
  // resolves the config against it (kernels/kernel_plan.h), loads the weights
  // with the layouts' rules as a second stage over the architecture's (weights/conversion_plan.h), then records the
  // step graph with the chosen kernels. Errors also name the config entry.
  static Result<std::shared_ptr<Model>> load(const std::string& dir, const LoadOptions& options);
  // A model whose step graph (with its weights as parameters) comes from
  // elsewhere — an exported program (export/program_io.h) — with `dir`'s
  // config.json for the module tree's settings (KV layout, windows). It has no
  // checkpoint: save_pretrained and the weight plan are unavailable
  // (has_checkpoint() is false).
  static Result<std::shared_ptr<Model>> from_step_graph(const std::string& dir, graph::Graph step_graph);
  bool has_checkpoint() const { return checkpoint_ != nullptr; }

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  const CausalLM& module() const { return *module_; }
  const Checkpoint& checkpoint() const { return *checkpoint_; }
  // The checkpoint → parameters plan this instance was loaded with.
  const ConversionPlan& weight_plan() const { return *plan_; }
  // What loading did: parameters viewed in place, made, or taken from the weights
  // cache without reading what they were made from (skipped_params).
  const LoadStats& load_stats() const { return load_stats_; }
  const WeightRules& weight_rules() const { return rules_; }
  // Every module parameter by name, as the graph uses it.
  const std::map<std::string, Tensor>& parameters() const { return params_; }

  // The graph of one forward step over a packed batch (see step_io names).
  // Built once; every caller shares it.
  std::shared_ptr<const graph::Graph> step_graph() const { return graph_; }
  // The kernel plan this instance was loaded with; nullptr without a KernelConfig.
  const kernels::KernelPlan* kernel_plan() const { return kernel_plan_.get(); }

  int64_t vocab_size() const { return config_.vocab_size; }
  int num_layers() const { return static_cast<int>(config_.num_hidden_layers); }
  // Of this rank: the KV cache of a tensor-parallel rank holds its heads only.
  // This rank's KV heads: a slice of them, or one replicated head when the ranks
  // outnumber them (models/layers.cc, SelfAttention::apply_tensor_parallel).
  int64_t num_kv_heads() const { return std::max<int64_t>(1, config_.num_key_value_heads / tp_.size); }
  const TensorParallel& tensor_parallel() const { return tp_; }
  int64_t head_dim() const { return config_.head_dim; }

 private:
  Model() = default;
  std::string dir_;
  ModelConfig config_;
  std::unique_ptr<CausalLM> module_;
  std::unique_ptr<Checkpoint> checkpoint_;
  WeightRules rules_;
  std::unique_ptr<ConversionPlan> plan_;
  LoadStats load_stats_;
  std::map<std::string, Tensor> params_;
  std::shared_ptr<const graph::Graph> graph_;
  std::unique_ptr<kernels::KernelPlan> kernel_plan_;
  TensorParallel tp_;
};

// The module tree's parameters as a conversion plan expects them: name → shape,
// dtype left to the checkpoint (loom runs F32, BF16 and F16 weights as stored).
ExpectedParams expected_parameters(const Module& root);

// What kernels/ sees of a module tree (kernels/module_view.h): every module
// with its subtree's parameters, on the CPU, and `graph` (the graph recorded
// with every module's own forward; not owned) for fusion checks.
kernels::ModuleView module_view(const Module& root, const graph::Graph* graph);
// The model's tree and its step graph. The step graph is the plain graph only
// for a model loaded without kernels.
kernels::ModuleView module_view(const Model& model);

}  // namespace loom::models
