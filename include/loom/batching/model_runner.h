// A model bound to a backend: runs one packed step (any mix of prefill chunks and
// decode tokens from several sequences) against a KvStore and returns logits.
// Single-request generation, perplexity and the continuous-batching manager all
// drive the model through this one class.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/models/model.h"
#include "loom/runtime/collectives.h"
#include "loom/runtime/executor.h"
#include "loom/runtime/kv_cache_contiguous.h"

namespace loom::batching {

struct SequenceChunk {
  const int32_t* tokens = nullptr;  // the new tokens of this sequence in this step
  int64_t num_tokens = 0;
  int64_t past_len = 0;             // tokens already in its KV cache
  // With kLastOfEachSequence: a row for every token of this chunk instead of its
  // last one (prompt log-probabilities of one request in a mixed step).
  bool all_rows = false;
};

enum class LogitsRows { kLastOfEachSequence, kAllTokens };

class ModelRunner {
 public:
  static Result<std::unique_ptr<ModelRunner>> create(std::shared_ptr<const models::Model> model,
                                                      const std::string& backend = "cpu", ThreadPool* pool = nullptr);

  // Sequence i of `chunks` uses kv.pages(layer, i). Returns F32 logits, one row
  // per sequence (per token of the chunks marked all_rows; per token of every
  // chunk with kAllTokens), in chunk order: a view valid until the next step.
  // Token ids outside the vocabulary are an error naming the sequence and position.
  Result<Tensor> step(const std::vector<SequenceChunk>& chunks, graph::KvStore& kv,
                      LogitsRows rows = LogitsRows::kLastOfEachSequence);
  // The same, assigning the logits view to *logits: a step of a shape seen before
  // allocates nothing (assigning over a Tensor of the same rank reuses its shape),
  // where returning a new Tensor allocates its shape.
  Status step_into(const std::vector<SequenceChunk>& chunks, graph::KvStore& kv, LogitsRows rows, Tensor* logits);

  // Tensor parallelism (models/tensor_parallel.h, batching/step_broadcast.h): on
  // rank 0, step() first sends the other ranks the step's plan, and
  // end_steps() tells them it is done. The other ranks call follow_steps(),
  // which runs each plan on this rank's shard until end_steps(). A single
  // process leads, and end_steps() does nothing.
  bool leads_steps() const;
  runtime::Collectives* group() const { return group_; }
  Status follow_steps();
  Status end_steps();

  const models::Model& model() const { return *model_; }
  runtime::KvLayout kv_layout() const;
  const std::string& backend_name() const { return executor_->backend().name(); }
  ThreadPool& pool() const { return *pool_; }

 private:
  ModelRunner() = default;
  Status prepare(const std::vector<SequenceChunk>& chunks, LogitsRows rows);
  Status send_plan(const std::vector<SequenceChunk>& chunks, graph::KvStore& kv, LogitsRows rows);
  Status execute(graph::KvStore& kv);
  runtime::Collectives* group_ = nullptr;  // tensor parallel: the process group
  bool ended_ = false;                      // end_steps() was called
  std::shared_ptr<const models::Model> model_;
  std::unique_ptr<runtime::Executor> executor_;
  ThreadPool* pool_ = nullptr;
  graph::StepContext ctx_;
  std::vector<int32_t> ids_, rows_;
  // Views of ids_, ctx_.positions and rows_, made again only when those move or
  // change length; bound_[input_slot_[i]] is graph input i.
  Tensor ids_view_, positions_view_, rows_view_;
  std::vector<const Tensor*> bound_;
};

}  // namespace loom::batching
