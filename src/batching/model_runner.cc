#include "loom/batching/model_runner.h"

#include "loom/batching/step_broadcast.h"

namespace loom::batching {

namespace step_io = models::step_io;

Result<std::unique_ptr<ModelRunner>> ModelRunner::create(std::shared_ptr<const models::Model> model,
                                                          const std::string& backend, ThreadPool* pool) {
  const runtime::Backend* b = runtime::find_backend(backend);
  if (!b) return invalid_argument("unknown backend '" + backend + "' (cpu, reference)");
  std::unique_ptr<ModelRunner> r(new ModelRunner());
  r->pool_ = pool ? pool : &ThreadPool::global();
  const models::TensorParallel& tp = model->tensor_parallel();
  if (tp.active()) {
    r->group_ = runtime::process_collectives();
    const int size = r->group_ ? r->group_->size() : 1;
    if (size != tp.size || r->group_->rank() != tp.rank)
      return failed_precondition("a model sharded for rank " + std::to_string(tp.rank) + " of " + std::to_string(tp.size) +
                                 " tensor-parallel ranks, in a process group of " + std::to_string(size));
  }
  LOOM_ASSIGN_OR_RETURN(r->executor_, runtime::Executor::create(model->step_graph(), *b, r->pool_));
  // Inputs are bound by position on every step, not looked up by name.
  r->bound_.assign(r->executor_->graph().inputs().size(), nullptr);
  const std::pair<const char*, const Tensor*> inputs[] = {{step_io::kInputIds, &r->ids_view_},
                                                          {step_io::kPositions, &r->positions_view_},
                                                          {step_io::kLogitsIndices, &r->rows_view_}};
  for (const auto& [name, view] : inputs) {
    LOOM_ASSIGN_OR_RETURN(const size_t i, r->executor_->input_index(name));
    r->bound_[i] = view;
  }
  for (size_t i = 0; i < r->bound_.size(); ++i)
    if (!r->bound_[i])
      return unsupported("the step graph has an input '" + r->executor_->graph().value(r->executor_->graph().inputs()[i]).name +
                         "' a ModelRunner does not feed");
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
  Tensor logits;
  LOOM_RETURN_IF_ERROR(step_into(chunks, kv, rows, &logits));
  return logits;
}

Status ModelRunner::step_into(const std::vector<SequenceChunk>& chunks, graph::KvStore& kv, LogitsRows rows,
                              Tensor* logits) {
  LOOM_RETURN_IF_ERROR(prepare(chunks, rows));
  if (group_) {
    if (!leads_steps()) return failed_precondition("tensor parallelism: only rank 0 drives steps; the others follow them");
    if (ended_) return failed_precondition("tensor parallelism: a step after end_steps()");
    LOOM_RETURN_IF_ERROR(send_plan(chunks, kv, rows));
  }
  LOOM_RETURN_IF_ERROR(execute(kv));
  *logits = executor_->output(0);
  return Status::Ok();
}

bool ModelRunner::leads_steps() const { return !group_ || group_->rank() == 0; }

Status ModelRunner::send_plan(const std::vector<SequenceChunk>& chunks, graph::KvStore& kv, LogitsRows rows) {
  const graph::KvMemory mem = kv.memory();
  if (!mem.base) return unsupported("tensor parallelism: this KV store has no memory block to share with the other ranks");
  StepBroadcast plan;
  plan.all_token_rows = rows == LogitsRows::kAllTokens;
  plan.kv_id = reinterpret_cast<uintptr_t>(mem.base);
  plan.kv_bytes = mem.bytes;
  const auto* base = static_cast<const char*>(mem.base);
  auto offset = [&](void* page) -> int64_t { return page ? static_cast<const char*>(page) - base : -1; };
  for (size_t i = 0; i < chunks.size(); ++i) {
    StepBroadcastSequence s;
    s.tokens.assign(chunks[i].tokens, chunks[i].tokens + chunks[i].num_tokens);
    s.past_len = chunks[i].past_len;
    s.all_rows = chunks[i].all_rows;
    for (int l = 0; l < model_->num_layers(); ++l) {
      const graph::KvPageTable t = kv.pages(l, static_cast<int>(i));
      plan.page_size = t.page_size;
      plan.kv_format = t.format;
      s.k_pages.emplace_back();
      s.v_pages.emplace_back();
      for (int64_t p = 0; p < t.num_pages; ++p) {
        s.k_pages.back().push_back(offset(t.k_pages[p]));
        s.v_pages.back().push_back(offset(t.v_pages[p]));
      }
    }
    plan.sequences.push_back(std::move(s));
  }
  std::vector<uint8_t> bytes = encode_step_broadcast(plan);
  return group_->broadcast(&bytes, 0, /*bounded=*/true);
}

Status ModelRunner::end_steps() {
  if (!group_ || !leads_steps() || ended_) return Status::Ok();
  ended_ = true;
  StepBroadcast plan;
  plan.stop = true;
  std::vector<uint8_t> bytes = encode_step_broadcast(plan);
  return group_->broadcast(&bytes, 0, /*bounded=*/true);
}

Status ModelRunner::follow_steps() {
  if (!group_ || leads_steps()) return failed_precondition("follow_steps: this process leads the steps");
  MirroredKvStore kv;
  std::vector<uint8_t> bytes;
  std::vector<SequenceChunk> chunks;
  while (true) {
    // Rank 0 may be idle for as long as it likes (a server between requests).
    LOOM_RETURN_IF_ERROR(group_->broadcast(&bytes, 0, /*bounded=*/false));
    LOOM_ASSIGN_OR_RETURN(StepBroadcast plan, decode_step_broadcast(bytes));
    if (plan.stop) return Status::Ok();
    LOOM_RETURN_IF_ERROR(kv.bind(plan));
    chunks.clear();
    for (const StepBroadcastSequence& s : plan.sequences)
      chunks.push_back({s.tokens.data(), static_cast<int64_t>(s.tokens.size()), s.past_len, s.all_rows});
    LOOM_RETURN_IF_ERROR(prepare(chunks, plan.all_token_rows ? LogitsRows::kAllTokens : LogitsRows::kLastOfEachSequence));
    LOOM_RETURN_IF_ERROR(execute(kv));
  }
}

Status ModelRunner::prepare(const std::vector<SequenceChunk>& chunks, LogitsRows rows) {
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
  return Status::Ok();
}

namespace {
// Rewraps only when the vector moved or changed length, so a steady decode loop
// binds the same views step after step.
void view_of(std::vector<int32_t>& v, Tensor* view) {
  const int64_t n = static_cast<int64_t>(v.size());
  if (view->defined() && view->data() == v.data() && view->dim(0) == n) return;
  *view = Tensor::wrap(v.data(), DType::kI32, {n});
}
}  // namespace

Status ModelRunner::execute(graph::KvStore& kv) {
  ctx_.kv = &kv;
  view_of(ids_, &ids_view_);
  view_of(ctx_.positions, &positions_view_);
  view_of(rows_, &rows_view_);
  return executor_->run(std::span<const Tensor* const>(bound_), &ctx_);
}

}  // namespace loom::batching
