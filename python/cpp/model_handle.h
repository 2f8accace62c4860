// A loaded model as the bindings hold it: the model, its tokenizer (when the
// checkpoint has one), and one runner for the calls that run it directly
// (forward, generate). The runner keeps per-step state, so those calls take
// `run_mutex`; managers get runners of their own.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loom/batching/continuous_batching_manager.h"
#include "loom/batching/model_runner.h"
#include "loom/core/thread_pool.h"
#include "loom/kernels/kernel_config.h"
#include "loom/models/model.h"
#include "loom/structured/constraint.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::python {

struct ModelHandle {
  // This model's worker threads (from_pretrained(num_threads=)); null: the global
  // pool. First, so every runner below is gone before it.
  std::shared_ptr<ThreadPool> pool;
  std::shared_ptr<models::Model> model;
  std::shared_ptr<Tokenizer> tokenizer;  // null when the folder has no tokenizer.json
  std::string backend = "cpu";
  std::unique_ptr<batching::ModelRunner> runner;
  std::mutex run_mutex;
  // generate_batch(persistent_manager=True) keeps its manager here.
  std::shared_ptr<batching::ContinuousBatchingManager> persistent_manager;

  // A new runner on this model's pool.
  std::shared_ptr<batching::ModelRunner> new_runner() const;
  // Runners of finished generate_batch calls, reused by the next ones (creating a
  // runner sets up its executor; a call takes one no other call is using).
  std::shared_ptr<batching::ModelRunner> take_runner();
  void give_back_runner(std::shared_ptr<batching::ModelRunner> runner);
  std::mutex idle_mutex;
  std::vector<std::shared_ptr<batching::ModelRunner>> idle_runners;

  // Output constraints compiled for this model's tokenizer, shared by every call
  // (constraints.cc; built on first use).
  std::once_flag constraints_once;
  std::unique_ptr<structured::ConstraintRegistry> constraints;

  // Each request's detokenizer (output text, stop strings), as `loom batch` makes it.
  batching::ManagerOptions manager_options() const;
};

// A TextStream over the incremental detokenizer, started after `prompt`
// (special tokens hidden), as the CLI's.
std::unique_ptr<batching::TextStream> make_text_stream(std::shared_ptr<const Tokenizer> tokenizer,
                                                       const std::vector<int32_t>& prompt);

// The generation config of a call: `json_text` (the Python GenerationConfig's
// to_dict()) with EOS/BOS/PAD inherited from config.json.
GenerationConfig call_generation_config(const ModelHandle& h, const std::string& json_text);

}  // namespace loom::python
