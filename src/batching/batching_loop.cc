// The batching loop (one background thread): take in new requests and
// cancellations, plan a step, run it, sample, hand out outputs. With async
// batching a helper thread plans step N+1 while step N computes; the plan is
// then corrected for what step N changed (finished requests leave it) and
// topped up, with preemption allowed, before it runs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "batching/constrained_decoding.h"
#include "batching/result_queue.h"
#include "batching/wall_clock.h"
#include "loom/batching/continuous_batching_manager.h"
#include "loom/batching/paged_kv_cache.h"
#include "loom/batching/prompt_lookup.h"
#include "loom/batching/step_cost.h"
#include "loom/batching/request_state.h"
#include "loom/batching/scheduler.h"
#include "loom/core/logging.h"

namespace loom::batching {

using generation::FinishReason;

void ContinuousBatchingManager::loop() {
  try {
    while (true) {
      std::vector<std::unique_ptr<RequestState>> fresh;
      std::vector<std::string> cancels;
      bool hard = false;
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (pause_count_ > 0 && !hard_stop_) {
          paused_ = true;
          cv_.notify_all();
          cv_.wait(lk, [&] { return pause_count_ == 0 || hard_stop_; });
          paused_ = false;
        }
        fresh.swap(incoming_);
        cancels.swap(cancels_);
        hard = hard_stop_;
        if (!hard && fresh.empty() && cancels.empty() && !has_work()) {
          if (stop_requested_) break;
          cv_.wait(lk, [&] {
            return !incoming_.empty() || !cancels_.empty() || stop_requested_ || hard_stop_ || pause_count_ > 0;
          });
          continue;
        }
      }
      for (auto& r : fresh) admit_new(std::move(r));
      for (const std::string& id : cancels) cancel_now(id);
      if (hard) {
        fail_everything(Status(ErrorCode::kCancelled, "the manager was stopped (hard_stop) before the request completed"));
        break;
      }
      if (has_work()) run_step();
      publish_stats();
    }
  } catch (const std::exception& e) {
    const Status why = internal_error(std::string("batching loop: ") + e.what());
    log_error(why.to_string());
    {
      std::lock_guard<std::mutex> lk(mu_);
      fatal_ = why;
    }
    try {
      fail_everything(why);
    } catch (const std::exception& e2) {
      log_error(std::string("batching loop: failing requests after a fatal error: ") + e2.what());
    }
  }
  publish_stats();
  bool keep;
  {
    std::lock_guard<std::mutex> lk(mu_);
    keep = keep_cache_ && !fatal_;
  }
  if (!keep) {  // every request has ended: nothing references the pool
    next_plan_.reset();
    scheduler_.reset();
    kv_.reset();
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    thread_alive_ = false;
    paused_ = false;
  }
  cv_.notify_all();
  results_->close();
}

bool ContinuousBatchingManager::has_work() const {
  return (scheduler_ && !scheduler_->idle()) || (next_plan_ && !next_plan_->empty());
}

void ContinuousBatchingManager::admit_new(std::unique_ptr<RequestState> r) {
  RequestState* raw = r.get();
  raw->arrival = next_arrival_++;
  requests_[raw->id] = std::move(r);
  if (raw->max_new_tokens == 0) {
    finish(raw, RequestStatus::kFinished, FinishReason::kLength);
    return;
  }
  scheduler_->add(raw);
}

void ContinuousBatchingManager::cancel_now(const std::string& id) {
  const Status why(ErrorCode::kCancelled, "request '" + id + "' was cancelled");
  auto it = requests_.find(id);
  if (it != requests_.end()) {
    finish(it->second.get(), RequestStatus::kFailed, FinishReason::kCancelled, why);
    return;
  }
  // A sequence of num_return_sequences not forked yet: its parent forgets it.
  const size_t hash = id.rfind('#');
  if (hash == std::string::npos) return;  // ended meanwhile
  auto parent = requests_.find(id.substr(0, hash));
  if (parent == requests_.end()) return;
  auto& forks = parent->second->forks;
  for (auto f = forks.begin(); f != forks.end(); ++f) {
    if (f->second != id) continue;
    const int32_t index = f->first;
    forks.erase(f);
    end_unforked(*parent->second, index, id, RequestStatus::kFailed, FinishReason::kCancelled, why);
    return;
  }
}

void ContinuousBatchingManager::fail_everything(const Status& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& r : incoming_) {
      r->arrival = next_arrival_++;
      requests_[r->id] = std::move(r);
    }
    incoming_.clear();
  }
  const FinishReason reason = why.code() == ErrorCode::kCancelled ? FinishReason::kCancelled : FinishReason::kError;
  std::vector<RequestState*> all;
  for (auto& [id, r] : requests_) all.push_back(r.get());
  std::sort(all.begin(), all.end(), [](const RequestState* a, const RequestState* b) { return a->arrival < b->arrival; });
  for (RequestState* r : all) finish(r, RequestStatus::kFailed, reason, why);
  next_plan_.reset();
}

void ContinuousBatchingManager::planner_loop() {
  std::unique_lock<std::mutex> lk(planner_mu_);
  while (true) {
    planner_cv_.wait(lk, [&] { return planner_has_job_ || planner_quit_; });
    if (planner_quit_) return;
    planner_has_job_ = false;
    StepPlan* target = planner_target_;
    lk.unlock();
    std::exception_ptr error;
    try {
      scheduler_->schedule(*target, /*speculative=*/true);
    } catch (...) {
      error = std::current_exception();
    }
    lk.lock();
    planner_error_ = error;
    planner_done_ = true;
    planner_cv_.notify_all();
  }
}

void ContinuousBatchingManager::finalize_plan(StepPlan& plan) {
  // Requests that ended in the last step were removed by finish(); the rest
  // must now stand exactly where the plan assumed.
  std::vector<PlannedChunk> kept;
  plan.num_tokens = 0;
  for (const PlannedChunk& c : plan.chunks) {
    RequestState* r = c.request;
    if (c.start != r->num_computed || c.start + c.count > static_cast<int64_t>(r->tokens.size())) {
      log_warn("continuous batching: dropping a stale planned chunk of request '" + r->id + "'");
      kv_->trim(r->kv, r->num_computed);
      continue;
    }
    kept.push_back(c);
    plan.num_tokens += c.count;
  }
  plan.chunks.swap(kept);
  plan.short_of_memory = false;
}

Result<float*> ContinuousBatchingManager::run_model(const std::vector<SequenceChunk>& chunks) {
  try {
    // Into a Tensor kept across steps: a steady decode loop allocates nothing here.
    LOOM_RETURN_IF_ERROR(runner_->step_into(chunks, *view_, LogitsRows::kLastOfEachSequence, &step_logits_));
    return step_logits_.data_as<float>();
  } catch (const Error& e) {
    return e.status();
  } catch (const std::exception& e) {
    return internal_error(std::string("model step: ") + e.what());
  }
}

void ContinuousBatchingManager::run_step() {
  StepPlan plan;
  if (next_plan_) {
    plan = std::move(*next_plan_);
    next_plan_.reset();
    finalize_plan(plan);
  }
  scheduler_->schedule(plan, /*speculative=*/false);
  for (auto& [r, why] : scheduler_->take_rejected()) finish(r, RequestStatus::kFailed, FinishReason::kError, why);
  if (plan.empty()) {
    if (!scheduler_->idle()) throw Error(internal_error("scheduler: requests are queued but none could be scheduled"));
    return;
  }
  add_drafts(plan);

  std::vector<SequenceChunk>& chunks = step_chunks_;  // kept across steps: no allocation once grown
  std::vector<const SequenceKv*>& seqs = step_seqs_;
  chunks.clear();
  seqs.clear();
  int64_t admitted = 0;
  const double now = wall_seconds();
  for (const PlannedChunk& c : plan.chunks) {
    RequestState* r = c.request;
    r->inflight = c.count;
    if (c.draft > 0) chunks.push_back({r->draft_feed.data(), c.count, c.start, /*all_rows=*/true});
    else chunks.push_back({r->tokens.data() + c.start, c.count, c.start, r->needs_prompt_rows()});
    seqs.push_back(&r->kv);
    if (r->first_scheduled_time < 0) {
      r->first_scheduled_time = now;
      ++admitted;
    }
  }
  if (admitted > 0) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      queued_ -= admitted;
    }
    queue_cv_.notify_all();
  }
  kv_->bind(*view_, seqs);

  std::unique_ptr<StepPlan> next;
  if (res_.async_batching && planner_.joinable()) {
    next = std::make_unique<StepPlan>();
    std::lock_guard<std::mutex> pl(planner_mu_);
    planner_target_ = next.get();
    planner_done_ = false;
    planner_has_job_ = true;
    planner_cv_.notify_all();
  }
  prefetch_masks(plan);
  const auto t0 = std::chrono::steady_clock::now();
  Result<float*> logits = run_model(chunks);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (next) {
    std::unique_lock<std::mutex> pl(planner_mu_);
    planner_cv_.wait(pl, [&] { return planner_done_; });
    if (planner_error_) std::rethrow_exception(planner_error_);
    next_plan_ = std::move(next);
  }
  {
    std::lock_guard<std::mutex> sl(stats_mu_);
    stats_.step_seconds += dt;
    ++stats_.steps;
  }
  if (!logits.ok()) {
    fail_step(plan, logits.status());
    return;
  }
  step_cost_.record(plan.num_tokens, dt);
  float* rows = *logits;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const PlannedChunk& c = plan.chunks[i];
    if (c.draft > 0) {  // verified after the step's other rows are sampled
      to_verify_.push_back({c, rows});
      rows += c.count * vocab_;
      continue;
    }
    if (chunks[i].all_rows) {
      record_prompt_logprobs(c.request, c.start, c.count, rows);
      rows += (c.count - 1) * vocab_;
    }
    commit(c.request, c.count, rows);
    rows += vocab_;
  }
  sample_committed();
  for (const auto& [c, first_row] : to_verify_) verify_draft(c, first_row);
  to_verify_.clear();
}

void ContinuousBatchingManager::add_drafts(StepPlan& plan) {
  // Tokens the step will sample: one per chunk that reaches its request's last
  // known token (decodes, and prompts' last chunks), plus the drafts' expected gains.
  double tokens = 0;
  for (const PlannedChunk& c : plan.chunks)
    tokens += c.start + c.count == static_cast<int64_t>(c.request->tokens.size()) ? 1.0 : 0.0;
  for (PlannedChunk& c : plan.chunks) {
    RequestState* r = c.request;
    const int64_t n = static_cast<int64_t>(r->tokens.size());
    if (r->draft_length.max_tokens() <= 0) continue;
    // Only a plain decode: its one fed token is the last known one.
    if (c.count != 1 || c.start != n - 1 || c.start != r->num_computed || r->kv.swapped) continue;
    // No more tokens than the request may still generate after this step's own,
    // nor than the step's token budget leaves (drafts never displace real work:
    // they are added after the scheduler filled the step).
    int64_t want = std::min({r->draft_length.next(), r->max_new_tokens - r->generated() - 1,
                             res_.max_batch_tokens - plan.num_tokens});
    if (want <= 0) {
      r->draft_length.step_without_draft();
      continue;
    }
    draft_scratch_.clear();
    want = prompt_lookup_draft(r->tokens.data(), n, want, draft_scratch_);
    // Pages only from the free list, never by evicting a cached block or
    // preempting anyone: rolling the draft back then restores the pool exactly.
    want = std::min(want, kv_->max_fit_free(r->kv, n, want));
    // Once the step is compute-bound, drafted rows cost what the tokens they may
    // save would: draft only where the expected gain beats the step's own rate.
    const double gain = expected_accepted(want, r->draft_length.acceptance());
    if (want <= 0 || (res_.adaptive_speculation && !draft_pays(step_cost_, plan.num_tokens, tokens, want, gain)) ||
        !kv_->ensure(r->kv, n + want, /*may_evict=*/false)) {
      r->draft_length.step_without_draft();
      continue;
    }
    tokens += gain;
    r->draft_feed.assign(1, r->tokens.back());
    r->draft_feed.insert(r->draft_feed.end(), draft_scratch_.begin(), draft_scratch_.begin() + want);
    c.draft = want;
    c.count += want;
    plan.num_tokens += want;
  }
}

// Rows [0, 1 + draft) of a verification chunk: row i predicts the token after
// feed[i]. Each row is sampled exactly as a plain decode step would sample it —
// same processors, same RNG draw, same TokenFinisher — and the next row counts
// only while the sampled token equals the drafted one that was fed after it. So
// the tokens are those of plain decoding, greedy or sampled, and the first
// mismatch is itself the corrected token (or, with every draft accepted, the
// bonus token of the last row).
void ContinuousBatchingManager::verify_draft(const PlannedChunk& c, float* rows) {
  RequestState* r = c.request;
  r->inflight = 0;
  {
    std::lock_guard<std::mutex> sl(stats_mu_);
    stats_.computed_tokens += c.count;
    stats_.drafted_tokens += c.draft;
  }
  // The request's counts are kept up to date before each sample: a sample that
  // finishes the request frees it (and reports them).
  r->drafted_tokens += c.draft;
  int64_t accepted = 0;
  bool alive = true;
  for (int64_t i = 0; i <= c.draft; ++i) {
    r->num_computed = c.start + i + 1;  // feed[0, i] are accepted tokens: their K/V stands
    if (!sample_into(r, rows + i * vocab_)) {
      alive = false;  // finished and freed: its blocks (drafted pages too) went back to the pool
      break;
    }
    if (i == c.draft || r->tokens.back() != r->draft_feed[static_cast<size_t>(i + 1)]) break;
    ++accepted;
    ++r->accepted_draft_tokens;
  }
  {
    std::lock_guard<std::mutex> sl(stats_mu_);
    stats_.accepted_draft_tokens += accepted;
  }
  if (!alive) return;
  r->draft_length.record(c.draft, accepted);
  // The rejected positions' K/V is never read (attention reads positions below
  // the query's); pages holding only such positions go back to the free list.
  kv_->trim(r->kv, r->num_computed);
  kv_->register_blocks(r->kv, r->tokens, r->num_computed);
  kv_->drop_out_of_window(r->kv, r->num_computed);
}

// The masks this step's sampling will need, computed while the forward runs: a
// constrained request that samples after its chunk needs the mask of the state its
// last accepted token left.
void ContinuousBatchingManager::prefetch_masks(const StepPlan& plan) {
  if (!opts_.prefetch_masks) return;
  std::vector<structured::MaskPrefetcher::Job> jobs;
  for (const PlannedChunk& c : plan.chunks) {
    const RequestState* r = c.request;
    if (!r->constraint || c.start + c.count != static_cast<int64_t>(r->tokens.size())) continue;
    jobs.push_back({r->constraint->shared_constraint(), r->constraint->state()});
  }
  if (jobs.empty() && !mask_prefetcher_) return;
  if (!mask_prefetcher_) mask_prefetcher_ = std::make_unique<structured::MaskPrefetcher>();
  mask_prefetcher_->submit(std::move(jobs));
}

void ContinuousBatchingManager::record_prompt_logprobs(RequestState* r, int64_t start, int64_t count, const float* rows) {
  // Row i predicts the token at position start + i + 1.
  for (int64_t i = 0; i < count; ++i) {
    const size_t target = static_cast<size_t>(start + i + 1);
    if (target != r->prompt_logprob_next || target >= r->prompt.size()) continue;
    const float* row = rows + i * vocab_;
    r->prompt_logprobs.push_back(generation::token_logprob(row, vocab_, r->prompt[target]));
    if (r->prompt_logprobs_k > 0) r->prompt_top_logprobs.push_back(generation::top_logprobs(row, vocab_, r->prompt_logprobs_k));
    ++r->prompt_logprob_next;
  }
}

// A step failed. Run its sequences one by one so that only the request at fault fails.
void ContinuousBatchingManager::fail_step(StepPlan& plan, const Status& error) {
  // Drafts are only a guess: the retry feeds each request's own token alone.
  for (PlannedChunk& c : plan.chunks) {
    if (c.draft == 0) continue;
    c.count -= c.draft;
    c.draft = 0;
    c.request->inflight = c.count;
    kv_->trim(c.request->kv, c.start + c.count);
  }
  if (plan.chunks.size() == 1) {
    finish(plan.chunks[0].request, RequestStatus::kFailed, FinishReason::kError, error);
    return;
  }
  log_warn("continuous batching: a step of " + std::to_string(plan.chunks.size()) +
           " sequences failed (" + error.to_string() + "); retrying them one by one");
  for (const PlannedChunk& c : plan.chunks) {
    RequestState* r = c.request;
    kv_->bind(*view_, {&r->kv});
    const bool all_rows = r->needs_prompt_rows();
    Result<float*> logits = run_model({{r->tokens.data() + c.start, c.count, c.start, all_rows}});
    if (!logits.ok()) {
      finish(r, RequestStatus::kFailed, FinishReason::kError, logits.status());
      continue;
    }
    float* rows = *logits;
    if (all_rows) {
      record_prompt_logprobs(r, c.start, c.count, rows);
      rows += (c.count - 1) * vocab_;
    }
    commit(r, c.count, rows);
    sample_committed();  // before this chunk's logits go
  }
}

void ContinuousBatchingManager::commit(RequestState* r, int64_t count, float* row) {
  r->inflight = 0;
  r->num_computed += count;
  {
    std::lock_guard<std::mutex> sl(stats_mu_);
    stats_.computed_tokens += count;
  }
  if (r->num_computed == static_cast<int64_t>(r->tokens.size())) {
    if (!r->forks.empty()) fork_sequences(r, row);
    if (prepare_sample(r, row)) to_sample_.emplace_back(r, row);  // with the step's other rows
    return;
  }
  r->status = RequestStatus::kPrefilling;
  kv_->register_blocks(r->kv, r->tokens, r->num_computed);
  kv_->drop_out_of_window(r->kv, r->num_computed);
}

void ContinuousBatchingManager::sample_committed() {
  if (to_sample_.empty()) return;
  sample_jobs_.clear();
  for (const auto& [r, row] : to_sample_) sample_jobs_.push_back(sample_job(r, row));
  sampler_.run(sample_jobs_, vocab_, runner_->pool());
  for (size_t i = 0; i < to_sample_.size(); ++i) {
    RequestState* r = to_sample_[i].first;
    if (!accept_sampled(r, sample_jobs_[i].result)) continue;
    kv_->register_blocks(r->kv, r->tokens, r->num_computed);
    kv_->drop_out_of_window(r->kv, r->num_computed);
  }
  to_sample_.clear();
}

generation::SampleJob ContinuousBatchingManager::sample_job(RequestState* r, float* row) const {
  generation::SampleJob j;
  j.logits = row;
  j.params = &r->sampling;
  j.context = r->tokens;
  j.generated_begin = r->prompt.size();
  j.rng = &r->rng;
  j.with_logprob = r->want_logprobs;
  return j;
}

void ContinuousBatchingManager::fork_sequences(RequestState* parent, const float* row) {
  kv_->register_blocks(parent->kv, parent->tokens, parent->num_computed);  // the forks share the keys too
  std::vector<std::pair<int32_t, std::string>> forks;
  forks.swap(parent->forks);
  for (auto& [index, id] : forks) {
    auto owned = std::make_unique<RequestState>();
    RequestState* c = owned.get();
    c->id = id;
    c->arrival = next_arrival_++;
    c->prompt = parent->prompt;
    c->tokens = parent->tokens;
    c->max_new_tokens = parent->max_new_tokens;
    c->max_length = parent->max_length;
    c->sampling = parent->sampling;
    c->want_logprobs = parent->want_logprobs;
    c->top_logprobs_k = parent->top_logprobs_k;
    c->prompt_logprobs_k = parent->prompt_logprobs_k;
    c->prompt_logprob_next = parent->prompt_logprob_next;
    c->prompt_logprobs = parent->prompt_logprobs;
    c->prompt_top_logprobs = parent->prompt_top_logprobs;
    c->seed = parent->seed;
    c->draft_length = DraftLength(parent->draft_length.max_tokens());
    // A distinct stream per sequence, fixed by (seed, index): reproducible whatever the batch.
    c->rng.reseed(parent->seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index));
    if (opts_.text_stream) c->text_stream = opts_.text_stream(c->prompt);
    c->finisher = TokenFinisher(parent->finisher.eos_token_ids(), parent->finisher.stop_strings(), c->max_new_tokens,
                                c->text_stream.get());
    c->constraint = parent->constraint;
    c->thinking = parent->thinking;
    c->sequence_index = index;
    c->parent_id = parent->id;
    c->streaming = parent->streaming;
    c->record_timestamps = parent->record_timestamps;
    c->created_time = parent->created_time;
    c->first_scheduled_time = parent->first_scheduled_time;
    requests_[id] = std::move(owned);
    if (!kv_->fork(parent->kv, c->kv, parent->num_computed)) {
      scheduler_->add(c);  // no room to copy the partial page: it computes the prompt itself
      continue;
    }
    c->num_computed = parent->num_computed;
    scheduler_->add_running(c);
    fork_row_.assign(row, row + vocab_);
    if (!sample_into(c, fork_row_.data())) continue;
    kv_->drop_out_of_window(c->kv, c->num_computed);
  }
}

bool ContinuousBatchingManager::sample_into(RequestState* r, float* row) {
  if (!prepare_sample(r, row)) return false;
  generation::SampleJob job = sample_job(r, row);
  sampler_.run({&job, 1}, vocab_, runner_->pool());
  return accept_sampled(r, job.result);
}

bool ContinuousBatchingManager::prepare_sample(RequestState* r, float* row) {
  // Alternatives come from the raw row, before sample_next biases and penalizes it.
  if (r->top_logprobs_k > 0) r->top_logprobs.push_back(generation::top_logprobs(row, vocab_, r->top_logprobs_k));
  if (r->thinking && r->thinking_forced_from != RequestState::kThinkingLeftAlone) force_thinking_close(r, row);
  if (r->constraint) {
    const ConstraintStep step = mask_for_constraint(*r->constraint, row, vocab_, r->finisher.eos_token_ids());
    if (step == ConstraintStep::kComplete) {
      // The structure is closed and nothing may follow it: done, as if EOS came.
      finish(r, RequestStatus::kFinished, FinishReason::kEos);
      return false;
    }
    if (step == ConstraintStep::kDeadEnd) {
      finish(r, RequestStatus::kFailed, FinishReason::kError, dead_end_error(*r->constraint).with_context("request " + r->id));
      return false;
    }
  }
  return true;
}

void ContinuousBatchingManager::force_thinking_close(RequestState* r, float* row) {
  const ThinkingBudget& b = *r->thinking;
  const int64_t generated = r->generated();
  if (r->thinking_forced_from < 0) {
    if (generated < b.after_tokens) return;
    // Decided once, when the budget is spent: is the section still open?
    size_t open_end = 0;
    bool open = b.open_at_start;
    if (!open && !b.open.empty()) {
      const size_t at = r->text.find(b.open);
      open = at != std::string::npos;
      open_end = open ? at + b.open.size() : 0;
    }
    const bool closed = open && r->text.find(b.close, open_end) != std::string::npos;
    if (!open || closed) {
      r->thinking_forced_from = RequestState::kThinkingLeftAlone;
      return;
    }
    r->thinking_forced_from = generated;
  }
  // Counted from the tokens themselves, so a sample that was not kept forces the same id again.
  const int64_t k = generated - r->thinking_forced_from;
  if (k < 0 || k >= static_cast<int64_t>(b.close_ids.size())) {
    r->thinking_forced_from = RequestState::kThinkingLeftAlone;
    return;
  }
  const int32_t id = b.close_ids[static_cast<size_t>(k)];
  const float keep = row[id];
  std::fill(row, row + vocab_, -std::numeric_limits<float>::infinity());
  row[id] = std::isfinite(keep) ? keep : 0.0f;
}

bool ContinuousBatchingManager::accept_sampled(RequestState* r, const generation::SampledToken& tok) {
  r->tokens.push_back(tok.id);
  if (r->want_logprobs) r->logprobs.push_back(tok.logprob);
  if (r->record_timestamps) r->timestamps.push_back(wall_seconds());
  {
    std::lock_guard<std::mutex> sl(stats_mu_);
    ++stats_.generated_tokens;
  }
  Result<FinishReason> reason =
      r->finisher.accept(tok.id, r->generated(), r->constraint ? &*r->constraint : nullptr, r->text);
  if (!reason.ok()) {
    finish(r, RequestStatus::kFailed, FinishReason::kError, reason.status().with_context("request " + r->id));
    return false;
  }
  if (*reason != FinishReason::kNone) {
    finish(r, RequestStatus::kFinished, *reason);
    return false;
  }
  r->status = RequestStatus::kDecoding;
  if (r->streaming) deliver_streamed(*r);
  return true;
}

void ContinuousBatchingManager::end_unforked(const RequestState& parent, int32_t index, const std::string& id,
                                             RequestStatus status, FinishReason reason, const Status& error) {
  GenerationOutput o;
  o.request_id = id;
  o.sequence_index = index;
  o.parent_request_id = parent.id;
  o.prompt_ids = parent.prompt;
  o.status = status;
  o.finish_reason = reason;
  if (!error.ok()) {
    o.error = error.to_string();
    o.error_code = error.code();
  }
  o.created_time = parent.created_time;
  o.lifespan = {parent.first_scheduled_time, wall_seconds()};
  // Not live and not yet queued would be neither to register_result_handler.
  std::lock_guard<std::recursive_mutex> dl(delivery_mu_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    live_ids_.erase(id);
    sequence_ended_locked(parent.id);
  }
  {
    std::lock_guard<std::mutex> sl(stats_mu_);
    if (status == RequestStatus::kFinished) ++stats_.finished;
    else if (reason == FinishReason::kCancelled) ++stats_.cancelled;
    else ++stats_.failed;
  }
  deliver(std::move(o));
}

void ContinuousBatchingManager::sequence_ended_locked(const std::string& group) {
  auto it = groups_.find(group);
  if (it != groups_.end() && --it->second.live <= 0) groups_.erase(it);
}

void ContinuousBatchingManager::finish(RequestState* r, RequestStatus status, FinishReason reason, Status error) {
  if (next_plan_) next_plan_->remove(r);
  if (scheduler_) scheduler_->remove(r);
  if (kv_) {
    if (r->kv.swapped) {
      kv_->discard_swap(r->kv);
    } else {
      kv_->register_blocks(r->kv, r->tokens, r->num_computed);
      kv_->release(r->kv);
    }
  }
  r->inflight = 0;
  if (status == RequestStatus::kFinished) {
    if (Status shown = r->finisher.finish(reason, r->text); !shown.ok()) {
      status = RequestStatus::kFailed;
      reason = FinishReason::kError;
      error = shown;
    }
  }
  r->status = status;
  r->finish_reason = reason;
  r->error = error;
  r->end_time = wall_seconds();
  // From here to its output's delivery the request is no longer live but its output
  // not yet queued: register_result_handler (which holds delivery_mu_) must not look
  // in between, or it would find neither.
  std::lock_guard<std::recursive_mutex> dl(delivery_mu_);
  // Sequences not forked yet (the request ended before its first token) end alike.
  std::vector<std::pair<int32_t, std::string>> unforked;
  unforked.swap(r->forks);
  for (const auto& [index, id] : unforked) end_unforked(*r, index, id, status, reason, error);
  {
    std::lock_guard<std::mutex> lk(mu_);
    live_ids_.erase(r->id);
    sequence_ended_locked(r->parent_id.empty() ? r->id : r->parent_id);
    if (r->first_scheduled_time < 0) --queued_;
  }
  queue_cv_.notify_all();
  {
    std::lock_guard<std::mutex> sl(stats_mu_);
    if (status == RequestStatus::kFinished) ++stats_.finished;
    else if (reason == FinishReason::kCancelled) ++stats_.cancelled;
    else ++stats_.failed;
  }
  // Before the final output leaves: a caller who has it must see its step in stats()
  // (prefix hits, pages in use), not the stats of the step before.
  publish_stats();
  GenerationOutput out = snapshot(*r);
  streams_.erase(r->id);  // steps still queued keep their stream
  requests_.erase(r->id);  // r is gone from here on
  deliver(std::move(out));
}

GenerationOutput ContinuousBatchingManager::snapshot(const RequestState& r) const {
  GenerationOutput o;
  o.request_id = r.id;
  o.sequence_index = r.sequence_index;
  o.parent_request_id = r.parent_id;
  o.prompt_ids = r.prompt;
  o.generated_tokens.assign(r.tokens.begin() + static_cast<std::ptrdiff_t>(r.prompt.size()), r.tokens.end());
  o.logprobs = r.logprobs;
  o.top_logprobs = r.top_logprobs;
  o.prompt_logprobs = r.prompt_logprobs;
  o.prompt_top_logprobs = r.prompt_top_logprobs;
  o.status = r.status;
  o.finish_reason = r.finish_reason;
  if (!r.error.ok()) {
    o.error = r.error.to_string();
    o.error_code = r.error.code();
  }
  o.created_time = r.created_time;
  o.lifespan = {r.first_scheduled_time, r.end_time};
  o.timestamps = r.timestamps;
  o.text = r.text;
  o.drafted_tokens = r.drafted_tokens;
  o.accepted_draft_tokens = r.accepted_draft_tokens;
  return o;
}

void ContinuousBatchingManager::deliver(GenerationOutput out) {
  std::lock_guard<std::recursive_mutex> dl(delivery_mu_);
  auto it = handlers_.find(out.request_id);
  if (it == handlers_.end()) {
    results_->push(std::move(out));
    return;
  }
  Handler h = it->second;
  if (out.is_final()) handlers_.erase(it);
  try {
    if (h.executor) h.executor([cb = h.callback, o = std::move(out)] { cb(o); });
    else h.callback(out);
  } catch (const std::exception& e) {
    log_error(std::string("continuous batching: a result handler threw: ") + e.what());
  }
}

void ContinuousBatchingManager::deliver_streamed(const RequestState& r) {
  std::lock_guard<std::recursive_mutex> dl(delivery_mu_);
  std::shared_ptr<StreamedOutput>& stream = streams_[r.id];
  if (!stream) stream = std::make_shared<StreamedOutput>();
  const StreamedOutput::Mark mark = stream->catch_up(r);
  auto it = handlers_.find(r.id);
  if (it == handlers_.end()) {
    results_->push(stream, mark);
    return;
  }
  const Handler h = it->second;  // a callback may register or end handlers
  try {
    // Inline, the handler reads the stream itself (this thread is its only writer);
    // another thread gets its own copy.
    if (h.executor) h.executor([cb = h.callback, o = stream->current()] { cb(o); });
    else h.callback(stream->current());
  } catch (const std::exception& e) {
    log_error(std::string("continuous batching: a result handler threw: ") + e.what());
  }
}

void ContinuousBatchingManager::publish_stats() {
  std::lock_guard<std::mutex> sl(stats_mu_);
  if (scheduler_) {
    const SchedulerEvents& ev = scheduler_->events();
    stats_.preempted_recompute = ev.preempted_recompute;
    stats_.preempted_swap = ev.preempted_swap;
    stats_.prefix_hit_tokens = ev.prefix_hit_tokens;
    stats_.prefix_query_tokens = ev.prefix_query_tokens;
    stats_.waiting = static_cast<int64_t>(scheduler_->waiting().size());
    stats_.running = static_cast<int64_t>(scheduler_->running().size());
  }
  if (kv_) {
    const BlockPool& p = kv_->pool();
    stats_.pages_capacity = p.capacity_pages();
    stats_.pages_in_use = p.used_pages();
    stats_.peak_pages_in_use = p.peak_used_pages();
    stats_.cached_pages = kv_->prefix_cache() ? kv_->prefix_cache()->num_parked() * p.pages_per_block(0) : 0;
    stats_.kv_budget_bytes = p.budget_bytes();
    stats_.kv_bytes_in_use = p.bytes_in_use();
    stats_.dedup_blocks = kv_->stats().dedup_blocks;
    stats_.evicted_blocks = kv_->stats().evicted_blocks;
    stats_.swap_pages_capacity = kv_->swap_pool() ? kv_->swap_pool()->capacity_pages() : 0;
    stats_.swap_pages_in_use = kv_->swap_pool() ? kv_->swap_pool()->used_pages() : 0;
  }
}

}  // namespace loom::batching
