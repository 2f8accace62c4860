// generate_batch: run a list of prompts through a ContinuousBatchingManager and
// return every output in input order (Transformers' generate_batch). Requests
// that fail (or cannot be added) come back FAILED in their slot, with the error.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "loom/batching/continuous_batching_manager.h"

namespace loom::batching {

struct BatchInput {
  std::vector<int32_t> input_ids;
  RequestOptions options;  // request_id may be set; record_timestamps is overridden
};

struct BatchProgress {
  int64_t done = 0, total = 0;
  int64_t generated_tokens = 0;
  double elapsed_seconds = 0;
  double tokens_per_second = 0;  // generated tokens / elapsed
  int64_t pages_in_use = 0, pages_capacity = 0;
};

struct GenerateBatchOptions {
  bool record_timestamps = false;
  // progress_bar: called after each finished request (and at least every
  // progress_interval seconds while waiting), on the calling thread.
  std::function<void(const BatchProgress&)> progress;
  double progress_interval = 0.5;
  // persistent_manager: reuse *persistent_manager when set (started if needed),
  // else create one and store it there; it is left running. Null: a manager is
  // created for the call and destroyed at the end.
  std::shared_ptr<ContinuousBatchingManager>* persistent_manager = nullptr;
  bool warmup = true;
  ManagerOptions manager;
};

struct BatchResult {
  std::vector<GenerationOutput> outputs;  // in input order; an input with num_return_sequences = n has n consecutive slots
  ManagerStats stats;
  double seconds = 0;
  const GenerationOutput* find(const std::string& request_id) const;
};

Result<BatchResult> generate_batch(std::shared_ptr<ModelRunner> runner, const std::vector<BatchInput>& inputs,
                                   const GenerationConfig& generation_config,
                                   const ContinuousBatchingConfig& cb_config, const GenerateBatchOptions& options = {});

}  // namespace loom::batching
