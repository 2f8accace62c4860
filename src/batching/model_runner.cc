#include "loom/batching/model_runner.h"

namespace loom::batching {

namespace step_io = models::step_io;

Result<std::unique_ptr<ModelRunner>> ModelRunner::create(std::shared_ptr<const models::Model> model,
                                                          const std::string& backend, ThreadPool* pool) {
  const runtime::Backend* b = runtime::find_backend(backend);
  if (!b) return invalid_argument("unknown backend '" + backend + "' (cpu, reference)");
  std::unique_ptr<ModelRunner> r(new ModelRunner());
  r->pool_ = pool ? pool : &ThreadPool::global();
  LOOM_ASSIGN_OR_RETURN(r->executor_, runtime::Executor::create(model->step_graph(), *b, r->pool_));
  r->model_ = std::move(model);
  return r;
}

runtime::KvLayout ModelRunner::kv_layout() const {
  runtime::KvLayout l;
  l.num_layers = model_->num_layers();
  l.num_kv_heads = model_->num_kv_heads();
  l.head_dim = model_->head_dim();
  return l;
}

Result<Tensor> ModelRunner::step(const std::vector<SequenceChunk>& chunks, graph::KvStore& kv, LogitsRows rows) {
  if (chunks.empty()) return invalid_argument("step: no sequences");
  const int64_t vocab = model_->vocab_size();
  ctx_.sequences.clear();
  ctx_.positions.clear();
  ids_.clear();
  rows_.clear();
  for (size_t s = 0; s < chunks.size(); ++s) {
    const SequenceChunk& c = chunks[s];
    if (c.num_tokens <= 0) return invalid_argument("step: sequence " + std::to_string(s) + " has no new tokens");
    graph::StepSequence seq;
    seq.q_begin = static_cast<int64_t>(ids_.size());
    seq.q_len = c.num_tokens;
    seq.past_len = c.past_len;
    for (int64_t i = 0; i < c.num_tokens; ++i) {
      const int32_t id = c.tokens[i];
      if (id < 0 || id >= vocab)
        return out_of_range("token id " + std::to_string(id) + " at position " + std::to_string(c.past_len + i) +
                            " of sequence " + std::to_string(s) + " is outside the vocabulary [0, " +
                            std::to_string(vocab) + ")");
      ids_.push_back(id);
      ctx_.positions.push_back(static_cast<int32_t>(c.past_len + i));
      if (rows == LogitsRows::kAllTokens || c.all_rows) rows_.push_back(static_cast<int32_t>(ids_.size() - 1));
    }
    if (rows == LogitsRows::kLastOfEachSequence && !c.all_rows) rows_.push_back(static_cast<int32_t>(ids_.size() - 1));
    ctx_.sequences.push_back(seq);
  }
  ctx_.kv = &kv;
  const int64_t n = static_cast<int64_t>(ids_.size());
  std::vector<std::pair<std::string, Tensor>> inputs = {
      {step_io::kInputIds, Tensor::wrap(ids_.data(), DType::kI32, {n})},
      {step_io::kPositions, Tensor::wrap(ctx_.positions.data(), DType::kI32, {n})},
      {step_io::kLogitsIndices, Tensor::wrap(rows_.data(), DType::kI32, {static_cast<int64_t>(rows_.size())})},
  };
  std::vector<Tensor> outputs;
  LOOM_RETURN_IF_ERROR(executor_->run(inputs, &ctx_, &outputs));
  return outputs.at(0);
}

}  // namespace loom::batching
