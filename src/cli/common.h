// What every model-loading command shares: --model (default: the bundled
// model), --threads, --backend, --kernel-config (+ plugin directories);
// parsing id lists; JSON output helpers.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "loom/batching/generate.h"
#include "loom/batching/model_runner.h"
#include "loom/core/status.h"
#include "loom/generation/generation_config.h"

namespace loom::cli {

struct ModelOptions {
  std::string model_dir;
  int threads = 0;  // 0: LOOM_NUM_THREADS or all cores
  std::string backend = "cpu";
  std::string kernel_config;  // a KernelConfig JSON file; empty: the built-in fusions (unless turned off)
  bool builtin_fusions = true;  // --no-builtin-fusions: the checkpoint's own modules, unfused
  std::string matmul_precision;  // cpu::MatmulPrecision by name; empty: the process default (auto)
  std::string quantize;  // a weights/quantization_recipe.h name; empty: weights as stored
  std::vector<std::string> plugin_dirs, trusted_plugin_dirs;
  int tensor_parallel = 0;  // ranks of an mpirun job sharing the model; 0: not tensor parallel
};

// Adds --model, --threads, --backend, --kernel-config, --plugin-dir,
// --trusted-plugin-dir, --matmul-precision to `cmd`.
void add_model_options(CLI::App* cmd, ModelOptions* o, bool model_required = false);
// The model of a checkpoint folder or .gguf file (Model::load with the kernel flags:
// plugin directories without --kernel-config are an error, nothing would use them),
// or of a folder holding an exported program (`loom export --format program`), run
// like the checkpoint it came from; every command takes either. With a program, the
// flags that change how weights load (--kernel-config, --quantize, --tensor-parallel)
// are an error: its graph and weights are fixed at export.
// `tensor_parallel_ok`: the command runs --tensor-parallel (generate, batch,
// bench); elsewhere the flag is an error naming the ones that do.
Result<std::shared_ptr<models::Model>> load_model(const std::string& dir, const ModelOptions& o,
                                                  bool tensor_parallel_ok = false);

// With --tensor-parallel N: joins the mpirun job (once; load_model joins too)
// and returns this process's rank; 0 without the flag.
Result<int> join_tensor_parallel(const ModelOptions& o);
// With --tensor-parallel, on every rank but 0: runs rank 0's steps until it
// ends them, then returns true and the command returns (rank 0 alone reads
// input and prints). An error on such a rank ends the whole job.
bool follow_steps_unless_leader(batching::ModelRunner& runner);
// On rank 0: tells the other ranks to stop when the command ends, however it ends.
class StepsLeader {
 public:
  explicit StepsLeader(batching::ModelRunner& runner) : runner_(runner) {}
  ~StepsLeader();
  StepsLeader(const StepsLeader&) = delete;
  StepsLeader& operator=(const StepsLeader&) = delete;

 private:
  batching::ModelRunner& runner_;
};
// Bounds tensor-parallel waits (ContinuousBatchingConfig.cpu_group_timeout).
void set_tensor_parallel_timeout(std::optional<double> seconds);

// The bundled default model: $LOOM_DEFAULT_MODEL, else models/<default> next to
// the source tree or the installed binary.
std::string default_model_dir();
// Resolves the model dir (default when empty), applies --threads.
Result<std::string> resolve_model_dir(const ModelOptions& o);
// The process-wide settings among the flags: --threads and --matmul-precision.
void apply_process_options(const ModelOptions& o);

// Sampling and stopping flags shared by generate and chat.
struct SamplingFlags {
  std::optional<int64_t> max_new_tokens;
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int32_t> top_k;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool greedy = false;
  std::optional<int64_t> prompt_lookup_num_tokens;
};
void add_sampling_options(CLI::App* cmd, SamplingFlags* f);
// generation_config.json's values, overridden by the flags; EOS from the
// generation config, else from config.json.
batching::GenerateOptions make_generate_options(const SamplingFlags& f, const GenerationConfig& gc,
                                                const models::Model& model, int64_t prompt_length);

// "1,2, 3" or "[1, 2, 3]" → ids; the error names the bad entry.
Result<std::vector<int32_t>> parse_id_list(const std::string& text);

}  // namespace loom::cli
