// The caller-facing half of the manager: creation, add/cancel, results,
// lifecycle. The loop itself is in batching_loop.cc.
#include "loom/batching/continuous_batching_manager.h"

#include <chrono>
#include <random>

#include "batching/result_queue.h"
#include "batching/wall_clock.h"
#include "loom/batching/paged_kv_cache.h"
#include "loom/batching/request_state.h"
#include "loom/batching/scheduler.h"
#include "loom/core/logging.h"
#include "loom/runtime/kv_cache_contiguous.h"

namespace loom::batching {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

PauseGuard& PauseGuard::operator=(PauseGuard&& o) noexcept {
  if (this != &o) {
    release();
    m_ = o.m_;
    holder_ = o.holder_;
    o.m_ = nullptr;
  }
  return *this;
}

void PauseGuard::release() {
  if (m_) m_->unpause(holder_);
  m_ = nullptr;
}

std::optional<GenerationOutput> ResultIterator::next(std::optional<double> timeout) {
  if (done_) return std::nullopt;
  std::optional<GenerationOutput> out = m_->get_result(id_, timeout);
  if (out && out->is_final()) done_ = true;
  return out;
}

Result<std::unique_ptr<ContinuousBatchingManager>> ContinuousBatchingManager::create(
    std::shared_ptr<ModelRunner> runner, GenerationConfig generation_config, ContinuousBatchingConfig config,
    ManagerOptions options) {
  if (!runner) return invalid_argument("ContinuousBatchingManager: no model runner");
  LOOM_RETURN_IF_ERROR(config.validate());
  LOOM_RETURN_IF_ERROR(generation_config.validate());
  std::unique_ptr<ContinuousBatchingManager> m(new ContinuousBatchingManager());
  m->runner_ = std::move(runner);
  m->gc_ = std::move(generation_config);
  m->cfg_ = std::move(config);
  m->opts_ = std::move(options);
  m->vocab_ = m->runner_->model().vocab_size();
  const runtime::KvLayout l = m->runner_->kv_layout();
  const size_t position_bytes = graph::kv_position_bytes(m->cfg_.kv_format(), l.num_kv_heads, l.head_dim);
  // A step's f32 activations per token, roughly: residual, normed and attention
  // output, q/k/v, gate/up/act of the MLP, and a row of logits (upstream counts
  // hidden + vocab the same way).
  const ModelConfig& mc = m->runner_->model().config();
  const int64_t qkv = (mc.num_attention_heads + 2 * mc.num_key_value_heads) * mc.head_dim;
  const size_t act_per_token =
      sizeof(float) * static_cast<size_t>(3 * mc.hidden_size + qkv + 3 * mc.intermediate_size + mc.vocab_size);
  LOOM_ASSIGN_OR_RETURN(m->res_, resolve(m->cfg_, position_bytes, l.num_layers, 0, 0, act_per_token));
  if (const std::string gpu_only = m->cfg_.cpu_no_op_warning(); !gpu_only.empty()) log_warn(gpu_only);
  if (m->cfg_.block_size) log_warn("continuous batching: block_size is deprecated, use page_size");
  LOOM_RETURN_IF_ERROR(m->build_cache());
  if (m->cfg_.allow_block_sharing && !m->kv_->block_sharing())
    log_info("continuous batching: prefix caching is off for this model (sliding-window layers)");
  m->results_ = std::make_unique<ResultQueue>();
  m->view_ = std::make_unique<StepKvView>();
  return m;
}

Status ContinuousBatchingManager::build_cache() {
  PagedKvCacheOptions o;
  o.page_size = res_.page_size;
  o.num_pages = res_.num_blocks * runner_->model().num_layers();
  o.block_sharing = cfg_.allow_block_sharing;
  o.swap_pages = res_.swap_pages;
  o.swap_path = res_.swap_path;
  o.max_step_tokens = res_.max_batch_tokens;
  o.kv_format = cfg_.kv_format();
  try {
    kv_ = std::make_unique<PagedKvCache>(KvCacheLayout::from_model(runner_->model()), o);
  } catch (const Error& e) {
    return e.status();
  }
  SchedulerLimits lim;
  lim.max_batch_tokens = res_.max_batch_tokens;
  lim.max_requests_per_batch = res_.max_requests_per_batch;
  lim.safety_margin = res_.safety_margin;
  lim.max_blocks_per_request = res_.max_blocks_per_request;
  LOOM_ASSIGN_OR_RETURN(scheduler_, Scheduler::create(cfg_.scheduler_type, *kv_, lim));
  publish_stats();
  return Status::Ok();
}

ContinuousBatchingManager::~ContinuousBatchingManager() { destroy(); }

Result<std::string> ContinuousBatchingManager::add_request(std::vector<int32_t> input_ids, RequestOptions o) {
  if (input_ids.empty()) return invalid_argument("add_request: input_ids is empty (at least one token is needed)");
  for (size_t i = 0; i < input_ids.size(); ++i)
    if (input_ids[i] < 0 || input_ids[i] >= vocab_)
      return out_of_range("add_request: token id " + std::to_string(input_ids[i]) + " at position " + std::to_string(i) +
                          " is outside the vocabulary [0, " + std::to_string(vocab_) + ")");
  auto r = std::make_unique<RequestState>();
  const int64_t len = static_cast<int64_t>(input_ids.size());
  r->max_new_tokens = o.max_new_tokens.value_or(gc_.new_token_budget(len));
  if (r->max_new_tokens < 0) return invalid_argument("add_request: max_new_tokens must be ≥ 0");
  r->max_length = len + r->max_new_tokens;

  r->sampling = gc_.sampling();
  if (o.has_processor_args()) {
    if (cfg_.per_request_processors) {
      if (o.do_sample) r->sampling.do_sample = *o.do_sample;
      if (o.temperature) r->sampling.temperature = *o.temperature;
      if (o.top_k) r->sampling.top_k = *o.top_k;
      if (o.top_p) r->sampling.top_p = *o.top_p;
      if (o.min_p) r->sampling.min_p = *o.min_p;
      if (o.repetition_penalty) r->sampling.repetition_penalty = *o.repetition_penalty;
      if (o.presence_penalty) r->sampling.presence_penalty = *o.presence_penalty;
      if (o.frequency_penalty) r->sampling.frequency_penalty = *o.frequency_penalty;
      r->sampling.logit_bias = o.logit_bias;
    } else if (!cfg_.drop_unsupported_processors) {
      return invalid_argument("add_request: per-request sampling settings need per_request_processors = true "
                              "(or drop_unsupported_processors = true to ignore them)");
    } else {
      std::lock_guard<std::mutex> lk(mu_);
      if (!warned_dropped_processors_)
        log_warn("continuous batching: per-request sampling settings ignored (per_request_processors is false)");
      warned_dropped_processors_ = true;
    }
  }
  if (Status s = r->sampling.validate(vocab_); !s.ok()) return Status(s.code(), "add_request: " + s.message());
  if (o.top_logprobs < 0) return invalid_argument("add_request: top_logprobs must be ≥ 0, got " + std::to_string(o.top_logprobs));
  if (o.prompt_logprobs && *o.prompt_logprobs < 0)
    return invalid_argument("add_request: prompt_logprobs must be ≥ 0, got " + std::to_string(*o.prompt_logprobs));
  r->want_logprobs = cfg_.return_logprobs || o.logprobs || o.top_logprobs > 0;
  r->top_logprobs_k = o.top_logprobs;
  r->prompt_logprobs_k = o.prompt_logprobs.value_or(-1);
  const int64_t lookup = o.prompt_lookup_num_tokens.value_or(gc_.prompt_lookup_num_tokens.value_or(0));
  if (lookup < 0 || lookup > kMaxPromptLookupTokens)
    return invalid_argument("add_request: prompt_lookup_num_tokens must be in [0, " +
                            std::to_string(kMaxPromptLookupTokens) + "], got " + std::to_string(lookup));
  // Forced close tokens are not drafts the model could verify: no drafting then.
  r->draft_length = DraftLength(o.thinking_budget ? 0 : lookup);

  const int32_t num_sequences = o.num_return_sequences.value_or(static_cast<int32_t>(gc_.num_return_sequences));
  if (num_sequences < 1)
    return invalid_argument("add_request: num_return_sequences must be ≥ 1, got " + std::to_string(num_sequences));
  if (num_sequences > 1 && r->sampling.greedy())
    return invalid_argument("add_request: num_return_sequences = " + std::to_string(num_sequences) +
                            " needs sampling (do_sample with temperature > 0): greedy decoding would return identical sequences");

  if (o.seed) r->seed = *o.seed;
  else if (cfg_.seed) r->seed = *cfg_.seed;
  else if (gc_.seed) r->seed = *gc_.seed;
  else r->seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  r->rng.reseed(r->seed);

  std::vector<int32_t> eos_token_ids;
  if (o.eos_token_ids) eos_token_ids = *o.eos_token_ids;
  else
    for (int64_t id : gc_.eos_token_ids) eos_token_ids.push_back(static_cast<int32_t>(id));
  std::vector<std::string> stop_strings = gc_.stop_strings;
  for (const std::string& s : o.stop_strings) {
    if (s.empty()) return invalid_argument("add_request: an empty stop string");
    stop_strings.push_back(s);
  }
  if (!stop_strings.empty() && !opts_.text_stream)
    return invalid_argument("add_request: stop strings need a tokenizer (the manager has no text stream)");
  if (opts_.text_stream) r->text_stream = opts_.text_stream(input_ids);
  r->finisher = TokenFinisher(std::move(eos_token_ids), std::move(stop_strings), r->max_new_tokens, r->text_stream.get());
  if (o.constraint) {
    if (o.constraint->vocabulary()->size() > vocab_)
      return invalid_argument("add_request: the constraint's vocabulary (" + std::to_string(o.constraint->vocabulary()->size()) +
                              " ids) is larger than the model's (" + std::to_string(vocab_) + "): compiled for another tokenizer?");
    r->constraint.emplace(o.constraint);
  }
  if (o.thinking_budget) {
    const ThinkingBudget& b = *o.thinking_budget;
    if (o.constraint) return invalid_argument("add_request: a thinking budget cannot be combined with a constraint");
    if (!r->text_stream) return invalid_argument("add_request: a thinking budget needs a tokenizer (the manager has no text stream)");
    if (b.after_tokens < 0 || b.close.empty() || b.close_ids.empty())
      return invalid_argument("add_request: a thinking budget needs after_tokens >= 0, a close tag and its token ids");
    for (int32_t id : b.close_ids)
      if (id < 0 || id >= vocab_) return out_of_range("add_request: thinking budget close id " + std::to_string(id) + " is outside the vocabulary");
    r->thinking = b;
  }
  r->streaming = o.streaming;
  r->record_timestamps = o.record_timestamps;
  r->prompt = input_ids;
  r->tokens = std::move(input_ids);
  r->created_time = wall_seconds();

  std::string id;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (destroyed_) return failed_precondition("add_request: the manager was destroyed");
    if (o.request_id) {
      if (o.request_id->empty()) return invalid_argument("add_request: request_id is empty");
      if (live_ids_.count(*o.request_id)) return invalid_argument("add_request: request_id '" + *o.request_id + "' is already in use");
      id = *o.request_id;
    } else {
      do id = "req_" + std::to_string(auto_id_++);
      while (live_ids_.count(id));
    }
    if (cfg_.max_queue_size > 0 && queued_ >= cfg_.max_queue_size) {
      if (!o.queue_timeout)
        return resource_exhausted("add_request: the queue is full (max_queue_size = " + std::to_string(cfg_.max_queue_size) + ")");
      const auto wait = std::chrono::duration<double>(*o.queue_timeout);
      if (!queue_cv_.wait_for(lk, wait, [&] { return queued_ < cfg_.max_queue_size || destroyed_; }))
        return Status(ErrorCode::kTimeout, "add_request: the queue stayed full (max_queue_size = " +
                                               std::to_string(cfg_.max_queue_size) + ") for " +
                                               std::to_string(*o.queue_timeout) + " s");
      if (destroyed_) return failed_precondition("add_request: the manager was destroyed");
      if (live_ids_.count(id)) return invalid_argument("add_request: request_id '" + id + "' is already in use");
    }
    for (int32_t k = 1; k < num_sequences; ++k) {
      std::string fork_id = id + "#" + std::to_string(k);
      if (live_ids_.count(fork_id))
        return invalid_argument("add_request: request_id '" + fork_id + "' (sequence " + std::to_string(k) + " of '" +
                                id + "') is already in use");
      r->forks.emplace_back(k, std::move(fork_id));
    }
    r->id = id;
    live_ids_.insert(id);
    for (const auto& f : r->forks) live_ids_.insert(f.second);
    if (num_sequences > 1) groups_[id] = GroupInfo{num_sequences, num_sequences};
    ++queued_;
    {
      std::lock_guard<std::mutex> sl(stats_mu_);
      stats_.requests_added += num_sequences;
      stats_.prompt_tokens += len;
    }
    incoming_.push_back(std::move(r));
  }
  cv_.notify_all();
  return id;
}

Result<std::vector<std::string>> ContinuousBatchingManager::add_requests(const std::vector<std::vector<int32_t>>& inputs,
                                                                        const RequestOptions& options) {
  if (options.request_id) return invalid_argument("add_requests: request_id must be unset (ids are generated)");
  std::vector<std::string> ids;
  ids.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    Result<std::string> id = add_request(inputs[i], options);
    if (!id.ok()) return Status(id.status().code(), "input " + std::to_string(i) + ": " + id.status().message());
    ids.push_back(*id);
  }
  return ids;
}

Status ContinuousBatchingManager::cancel_request(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    const std::vector<std::string> ids = group_ids(request_id);
    bool any = false;
    for (const std::string& id : ids)
      if (live_ids_.count(id)) {
        cancels_.push_back(id);
        any = true;
      }
    if (!any) return not_found("cancel_request: no live request '" + request_id + "'");
  }
  cv_.notify_all();
  return Status::Ok();
}

std::optional<GenerationOutput> ContinuousBatchingManager::get_result(std::optional<std::string> request_id,
                                                                      std::optional<double> timeout) {
  return results_->pop(request_id, timeout);
}

ResultIterator ContinuousBatchingManager::request_id_iter(const std::string& request_id) {
  return ResultIterator(this, request_id);
}

Status ContinuousBatchingManager::register_result_handler(const std::string& request_id, ResultCallback callback,
                                                          Executor executor) {
  if (!callback) return invalid_argument("register_result_handler: no callback");
  std::lock_guard<std::recursive_mutex> dl(delivery_mu_);  // the loop cannot deliver meanwhile: order is kept
  // A request with num_return_sequences > 1: the handler takes every sequence. The
  // loop ends a sequence (no longer live) and queues its output under delivery_mu_,
  // so each one is live here or has its outputs queued: none falls between.
  std::vector<std::string> live;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const std::string& id : group_ids(request_id))
      if (live_ids_.count(id)) live.push_back(id);
  }
  // Queued outputs include those of sequences whose group has ended altogether.
  std::vector<GenerationOutput> queued = results_->take_group(request_id);
  if (live.empty() && queued.empty()) return not_found("register_result_handler: no request '" + request_id + "'");
  for (const std::string& id : live) handlers_[id] = Handler{callback, executor};
  for (const GenerationOutput& o : queued) handlers_[o.request_id] = Handler{callback, executor};  // a final one erases it
  // Delivered here, on the caller's thread, while the loop waits for delivery_mu_:
  // lifecycle calls from the handler meanwhile are refused as on the loop thread.
  {
    std::lock_guard<std::mutex> lk(mu_);
    delivering_id_ = std::this_thread::get_id();
  }
  for (GenerationOutput& o : queued) deliver(std::move(o));
  {
    std::lock_guard<std::mutex> lk(mu_);
    delivering_id_ = std::thread::id();
  }
  return Status::Ok();
}

std::vector<std::string> ContinuousBatchingManager::group_ids(const std::string& request_id) const {
  std::vector<std::string> ids{request_id};
  auto it = groups_.find(request_id);
  if (it != groups_.end())
    for (int32_t k = 1; k < it->second.size; ++k) ids.push_back(request_id + "#" + std::to_string(k));
  return ids;
}

Status ContinuousBatchingManager::check_may_wait_for_end_locked(const char* call, bool pause_blocks) const {
  if (!thread_alive_) return Status::Ok();
  if (on_loop_thread_locked())
    return failed_precondition(std::string(call) +
                               ": called from a result handler, which the batching loop waits for, so it cannot "
                               "wait for the loop to end; use stop(block=false) there");
  if (pause_blocks && !hard_stop_ && pause_holders_.count(std::this_thread::get_id()))
    return failed_precondition(std::string(call) +
                               ": this thread holds pause(), and the loop cannot finish its requests and end "
                               "while paused; leave the pause first (or stop with hard_stop or block=false)");
  return Status::Ok();
}

bool ContinuousBatchingManager::on_loop_thread() const {
  std::lock_guard<std::mutex> lk(mu_);
  return on_loop_thread_locked();
}

Status ContinuousBatchingManager::start() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (destroyed_) return failed_precondition("start: the manager was destroyed");
    if (thread_alive_ && !stop_requested_ && !hard_stop_) return Status::Ok();  // already running
    LOOM_RETURN_IF_ERROR(check_may_wait_for_end_locked("start", true));       // a stopping loop ends first
  }
  LOOM_RETURN_IF_ERROR(join());
  std::lock_guard<std::mutex> jl(join_mu_);
  std::unique_lock<std::mutex> lk(mu_);
  if (destroyed_) return failed_precondition("start: the manager was destroyed");
  if (thread_alive_) return Status::Ok();  // another caller restarted it meanwhile
  if (thread_.joinable()) thread_.join();  // a previous session's loop has ended
  if (!kv_) LOOM_RETURN_IF_ERROR(build_cache());
  stop_requested_ = hard_stop_ = false;
  fatal_.reset();
  results_->reopen();
  thread_alive_ = true;
  thread_ = std::thread(&ContinuousBatchingManager::loop, this);
  loop_id_ = thread_.get_id();
  if (res_.async_batching && !planner_.joinable()) planner_ = std::thread(&ContinuousBatchingManager::planner_loop, this);
  return Status::Ok();
}

Status ContinuousBatchingManager::stop(bool block, std::optional<double> timeout, bool keep_for_next_session,
                                       bool hard_stop) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (thread_alive_ && block) LOOM_RETURN_IF_ERROR(check_may_wait_for_end_locked("stop", !hard_stop));
    keep_cache_ = keep_for_next_session;
    if (!thread_alive_) return Status::Ok();
    if (hard_stop) hard_stop_ = true;
    else stop_requested_ = true;
  }
  cv_.notify_all();
  if (!block) return Status::Ok();
  Status ended = join(timeout);
  if (ended.code() == ErrorCode::kTimeout)
    return Status(ErrorCode::kTimeout, "stop: the batching loop did not end within " +
                                           std::to_string(timeout.value_or(0)) + " s");
  return ended;
}

Status ContinuousBatchingManager::join(std::optional<double> timeout) {
  {
    std::unique_lock<std::mutex> lk(mu_);
    LOOM_RETURN_IF_ERROR(check_may_wait_for_end_locked("join", !timeout));
    auto ended = [&] { return !thread_alive_; };
    if (timeout) {
      if (!cv_.wait_for(lk, std::chrono::duration<double>(*timeout), ended))
        return Status(ErrorCode::kTimeout,
                      "join: the batching loop did not end within " + std::to_string(*timeout) + " s");
    } else {
      cv_.wait(lk, ended);
    }
  }
  std::lock_guard<std::mutex> jl(join_mu_);
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  return Status::Ok();
}

Result<PauseGuard> ContinuousBatchingManager::pause() {
  std::unique_lock<std::mutex> lk(mu_);
  if (destroyed_) return failed_precondition("pause: the manager was destroyed");
  if (on_loop_thread_locked())
    return failed_precondition("pause: called from a result handler, which the batching loop waits for, so it "
                               "cannot park");
  const std::thread::id me = std::this_thread::get_id();
  ++pause_count_;
  ++pause_holders_[me];
  cv_.notify_all();
  cv_.wait(lk, [&] { return paused_ || !thread_alive_; });
  return PauseGuard(this, me);
}

void ContinuousBatchingManager::unpause(std::thread::id holder) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    --pause_count_;
    auto it = pause_holders_.find(holder);
    if (it != pause_holders_.end() && --it->second == 0) pause_holders_.erase(it);
  }
  cv_.notify_all();
}

bool ContinuousBatchingManager::is_running() const {
  std::lock_guard<std::mutex> lk(mu_);
  return thread_alive_;
}

std::optional<Status> ContinuousBatchingManager::fatal_error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return fatal_;
}

void ContinuousBatchingManager::destroy() {
  bool from_loop = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (torn_down_) return;
    destroyed_ = true;  // no request, start or pause gets in from here on
    from_loop = on_loop_thread_locked();
    if (from_loop) {
      // A result handler: the loop cannot be joined from itself. End it like a
      // hard stop; the teardown is left to the destructor or another destroy().
      keep_cache_ = false;
      hard_stop_ = true;
    }
  }
  cv_.notify_all();
  if (from_loop) return;
  std::lock_guard<std::mutex> dl(destroy_mu_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (torn_down_) return;  // another thread tore it down meanwhile
  }
  (void)stop(/*block=*/true, std::nullopt, /*keep_for_next_session=*/false, /*hard_stop=*/true);
  {
    std::lock_guard<std::mutex> pl(planner_mu_);
    planner_quit_ = true;
  }
  planner_cv_.notify_all();
  if (planner_.joinable()) planner_.join();
  std::vector<std::unique_ptr<RequestState>> never_ran;
  {
    std::lock_guard<std::mutex> lk(mu_);
    never_ran.swap(incoming_);
  }
  queue_cv_.notify_all();
  // Requests added but never started: they end like a hard stop's.
  for (auto& r : never_ran) {
    RequestState* raw = r.get();
    requests_[raw->id] = std::move(r);
    finish(raw, RequestStatus::kFailed, generation::FinishReason::kCancelled,
           Status(ErrorCode::kCancelled, "the manager was destroyed before the request ran"));
  }
  publish_stats();
  {
    std::lock_guard<std::mutex> jl(join_mu_);
    if (thread_.joinable()) thread_.join();
  }
  scheduler_.reset();
  kv_.reset();
  results_->close();
  std::lock_guard<std::mutex> lk(mu_);
  torn_down_ = true;
}

Status ContinuousBatchingManager::warmup() {
  LOOM_ASSIGN_OR_RETURN(PauseGuard guard, pause());
  const int64_t n = std::min<int64_t>(res_.max_batch_tokens, 32);
  std::vector<int32_t> ids(static_cast<size_t>(n) + 1, 0);
  runtime::ContiguousKvCache cache(runner_->kv_layout(), 1, n + 1);
  LOOM_RETURN_IF_ERROR(runner_->step({{ids.data(), n, 0}}, cache).status());
  LOOM_RETURN_IF_ERROR(runner_->step({{ids.data() + n, 1, n}}, cache).status());
  return Status::Ok();
}

ManagerStats ContinuousBatchingManager::stats() const {
  std::lock_guard<std::mutex> lk(stats_mu_);
  return stats_;
}

}  // namespace loom::batching
