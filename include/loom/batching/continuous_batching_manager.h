// ContinuousBatchingManager: many requests share one model. A background thread
// runs the loop — admit queued requests, pack decode tokens and prefill chunks
// of different requests into one step over the paged KV cache, sample each
// sequence with its own settings and RNG, hand out outputs — so requests join
// and leave between steps without waiting for a batch.
//
// Upstream's API (Transformers' ContinuousBatchingManager), with these
// differences: a cancelled request gets a final FAILED output (finish_reason
// cancelled); get_result(id) is O(1); result handlers run on an executor the
// caller chooses; pause() is an RAII guard counted across threads; stop(hard)
// fails what is left with an error instead of dropping it; a bad request fails
// alone; requests carry their own sampling settings, seed and stop strings.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "loom/batching/continuous_batching_config.h"
#include "loom/batching/generate.h"
#include "loom/batching/generation_output.h"
#include "loom/batching/model_runner.h"
#include "loom/batching/request_options.h"
#include "loom/batching/step_cost.h"
#include "loom/core/status.h"
#include "loom/generation/generation_config.h"
#include "loom/generation/sampling.h"
#include "loom/structured/mask_prefetcher.h"

namespace loom::batching {

class PagedKvCache;
class StepKvView;
class Scheduler;
class ResultQueue;
class StreamedOutput;
struct RequestState;
struct SequenceKv;
struct StepPlan;
struct PlannedChunk;

struct ManagerOptions {
  // Makes one request's detokenizer (given its prompt), for output text and stop
  // strings. Unset: no text, and stop strings are rejected.
  std::function<std::unique_ptr<TextStream>(const std::vector<int32_t>& prompt)> text_stream;
  // Constrained requests: compute each step's token masks on a worker thread while the
  // forward pass runs (structured::MaskPrefetcher). Off: on the batching thread when
  // the logits arrive. The output is the same either way.
  bool prefetch_masks = true;
};

struct ManagerStats {
  int64_t requests_added = 0, finished = 0, failed = 0, cancelled = 0;
  int64_t prompt_tokens = 0;     // of added requests
  int64_t generated_tokens = 0;
  // Speculative decoding: tokens drafted and verified, and accepted by the model.
  int64_t drafted_tokens = 0, accepted_draft_tokens = 0;
  int64_t computed_tokens = 0;   // positions fed to the model (prefill, recompute and decode)
  int64_t steps = 0;
  int64_t prefix_hit_tokens = 0; // positions served by the prefix cache at admission
  int64_t prefix_query_tokens = 0;  // positions looked up in the prefix cache at admission
  int64_t dedup_blocks = 0, evicted_blocks = 0;
  int64_t preempted_recompute = 0, preempted_swap = 0;
  int64_t waiting = 0, running = 0;
  // KV pool, in pages of one layer: capacity = num_blocks × num_layers.
  int64_t pages_capacity = 0, pages_in_use = 0, peak_pages_in_use = 0, cached_pages = 0;
  size_t kv_budget_bytes = 0, kv_bytes_in_use = 0;
  int64_t swap_pages_capacity = 0, swap_pages_in_use = 0;
  double step_seconds = 0;  // inside model steps
};

using ResultCallback = std::function<void(const GenerationOutput&)>;
// Runs a delivery job; e.g. posts it to the caller's event loop. Unset: inline on
// the batching thread (keep the callback short).
using Executor = std::function<void(std::function<void()>)>;

class ContinuousBatchingManager;

// Holding one keeps the loop parked between steps; the loop resumes when the
// last guard (of any thread) goes away. Nothing is drained or lost. The guard
// remembers the thread that took it: that thread may not wait for the loop to
// end (soft stop, join) while it holds the pause. A guard must not outlive its
// manager.
class PauseGuard {
 public:
  PauseGuard() = default;
  PauseGuard(PauseGuard&& o) noexcept : m_(o.m_), holder_(o.holder_) { o.m_ = nullptr; }
  PauseGuard& operator=(PauseGuard&& o) noexcept;
  PauseGuard(const PauseGuard&) = delete;
  PauseGuard& operator=(const PauseGuard&) = delete;
  ~PauseGuard() { release(); }
  void release();

 private:
  friend class ContinuousBatchingManager;
  PauseGuard(ContinuousBatchingManager* m, std::thread::id holder) : m_(m), holder_(holder) {}
  ContinuousBatchingManager* m_ = nullptr;
  std::thread::id holder_;
};

// The outputs of one request, blocking; ends after its final output.
class ResultIterator {
 public:
  // The next output, or nullopt once the final one was returned, on timeout, or
  // when the manager stopped with nothing more to deliver.
  std::optional<GenerationOutput> next(std::optional<double> timeout = std::nullopt);
  bool done() const { return done_; }

 private:
  friend class ContinuousBatchingManager;
  ResultIterator(ContinuousBatchingManager* m, std::string id) : m_(m), id_(std::move(id)) {}
  ContinuousBatchingManager* m_;
  std::string id_;
  bool done_ = false;
};

class ContinuousBatchingManager {
 public:
  // The generation config gives the defaults of every request (its eos ids
  // should already include the model's: GenerationConfig::inherit_special_tokens).
  // Errors name the config field. The manager is created stopped: call start().
  static Result<std::unique_ptr<ContinuousBatchingManager>> create(std::shared_ptr<ModelRunner> runner,
                                                                    GenerationConfig generation_config,
                                                                    ContinuousBatchingConfig config,
                                                                    ManagerOptions options = {});
  ~ContinuousBatchingManager();
  ContinuousBatchingManager(const ContinuousBatchingManager&) = delete;
  ContinuousBatchingManager& operator=(const ContinuousBatchingManager&) = delete;

  // Queues a request (also before start()). Errors: empty prompt, token id out of
  // the vocabulary, bad sampling values, duplicate id, stop strings without a
  // tokenizer (InvalidArgument/OutOfRange); queue full (ResourceExhausted, or
  // Timeout after options.queue_timeout); destroyed manager (FailedPrecondition).
  Result<std::string> add_request(std::vector<int32_t> input_ids, RequestOptions options = {});
  // add_request for each input with the same options (request_id must be unset);
  // stops at the first error.
  Result<std::vector<std::string>> add_requests(const std::vector<std::vector<int32_t>>& inputs,
                                                const RequestOptions& options = {});
  // The request ends with a final FAILED output, finish_reason cancelled, and
  // its blocks return to the pool. NotFound for an unknown or finished id.
  Status cancel_request(const std::string& request_id);

  // The next output (of `request_id` when given); nullopt after `timeout`
  // seconds, or at once when the manager is stopped and nothing is queued.
  std::optional<GenerationOutput> get_result(std::optional<std::string> request_id = std::nullopt,
                                             std::optional<double> timeout = std::nullopt);
  ResultIterator request_id_iter(const std::string& request_id);
  // Every output of `request_id` (one per token with streaming, else the final
  // one; without an executor, valid during the call only) goes to `callback`
  // through `executor` instead of the queue — including
  // outputs queued before the call, of every sequence of a num_return_sequences
  // request even when all had ended by then. Removed after the final output;
  // NotFound when the request is neither running nor has outputs queued.
  Status register_result_handler(const std::string& request_id, ResultCallback callback, Executor executor = nullptr);

  // Lifecycle calls never wait for something that cannot happen; instead they
  // fail with FailedPrecondition naming the reason. The two such waits:
  //  - inside a result handler run inline (on the batching thread, or on the
  //    caller's thread when register_result_handler hands it outputs already
  //    queued): the loop cannot park, end or be joined while the handler runs, so
  //    pause(), join() and stop(block=true) fail there; stop(block=false) and
  //    destroy() only request the end (destroy's teardown then happens in the
  //    destructor or a later destroy() from another thread);
  //  - on a thread holding pause(): the loop cannot finish requests or end
  //    until the pause is released, so a blocking soft stop, join() without a
  //    timeout (unless a hard stop is pending) and start() of a stopping loop
  //    fail there. A hard stop ends a paused loop, so it may block.
  // Another thread may wait on any of these: the holder of the pause or the
  // handler will let go.
  Status start();
  // Soft stop: finish every queued and running request, then end the loop. Hard
  // stop: end after the current step; unfinished requests fail (Cancelled).
  // block: wait up to `timeout` seconds for the loop to end (else Timeout).
  // keep_for_next_session: keep the KV pool and its prefix cache for the next
  // start(); otherwise they are freed when the loop ends and rebuilt on start().
  Status stop(bool block = true, std::optional<double> timeout = std::nullopt, bool keep_for_next_session = false,
              bool hard_stop = false);
  // Waits for the loop thread to end: Ok once it has (or was never started),
  // Timeout after `timeout` seconds.
  Status join(std::optional<double> timeout = std::nullopt);
  // Parks the loop between steps (waits until it is parked) so the caller may
  // use the model; see PauseGuard. FailedPrecondition once destroyed.
  Result<PauseGuard> pause();
  // Hard stop, join, free everything. Idempotent; the manager cannot start
  // again (add_request, start and pause fail with FailedPrecondition).
  void destroy();
  // Runs the model once on a dummy prefill and a decode (weights paged in,
  // scratch allocated) so the first requests do not pay for it.
  Status warmup();
  bool is_running() const;
  // Whether the caller runs inside a result handler the loop waits for (on the
  // batching thread, or delivered by register_result_handler).
  bool on_loop_thread() const;
  // Set when the loop died on an error no single request explains.
  std::optional<Status> fatal_error() const;

  ManagerStats stats() const;
  const CbResources& resources() const { return res_; }
  const ContinuousBatchingConfig& config() const { return cfg_; }
  const GenerationConfig& generation_config() const { return gc_; }
  ModelRunner& runner() const { return *runner_; }

 private:
  friend class PauseGuard;
  ContinuousBatchingManager() = default;
  Status build_cache();
  void unpause(std::thread::id holder);
  // Whether the calling thread is the loop's, or delivers outputs the loop waits for (mu_ held).
  bool on_loop_thread_locked() const {
    const std::thread::id me = std::this_thread::get_id();
    return (thread_alive_ && me == loop_id_) || me == delivering_id_;
  }
  // Why the calling thread may not wait for the loop to end, or Ok (mu_ held).
  Status check_may_wait_for_end_locked(const char* call, bool soft) const;

  // The loop and its parts (loop thread only).
  void loop();
  void admit_new(std::unique_ptr<RequestState> r);
  void cancel_now(const std::string& id);
  bool has_work() const;
  void run_step();
  Result<float*> run_model(const std::vector<SequenceChunk>& chunks);  // the step's logits rows
  void commit(RequestState* r, int64_t count, float* logits_row);
  // Speculative decoding: gives the plan's decodes of requests that draft their
  // drafted tokens (pages from the free list only), and after the step keeps the
  // longest accepted prefix plus one token, rolling the rest of the K/V back.
  void add_drafts(StepPlan& plan);
  void verify_draft(const PlannedChunk& c, float* rows);
  // Records the prompt log-probabilities in the rows of a chunk computed with all_rows.
  void record_prompt_logprobs(RequestState* r, int64_t start, int64_t count, const float* rows);
  void prefetch_masks(const StepPlan& plan);
  void fail_step(StepPlan& plan, const Status& error);
  void finalize_plan(StepPlan& plan);
  void finish(RequestState* r, RequestStatus status, generation::FinishReason reason, Status error = Status::Ok());
  void fail_everything(const Status& why);
  void deliver(GenerationOutput out);
  // A streamed step of r: appends what it added to r's StreamedOutput (no copy of r).
  void deliver_streamed(const RequestState& r);
  GenerationOutput snapshot(const RequestState& r) const;
  void publish_stats();
  // The request and, for num_return_sequences > 1, its other sequences' ids (mu_ held).
  std::vector<std::string> group_ids(const std::string& request_id) const;
  // num_return_sequences: the parent's prompt is computed; fork its sequences.
  void fork_sequences(RequestState* parent, const float* logits_row);
  // Samples r's next token from `row` (modified) and ends r when that finishes
  // it; false when r ended (and is gone).
  bool sample_into(RequestState* r, float* row);
  // sample_into in three parts, so that a step's rows are sampled together across
  // the pool: before (top logprobs, grammar mask; false when that ended r), the
  // draw, after (the token's text and finish checks; false when r ended).
  bool prepare_sample(RequestState* r, float* row);
  // RequestOptions::thinking_budget: masks the row to the next close token once the budget is spent.
  void force_thinking_close(RequestState* r, float* row);
  generation::SampleJob sample_job(RequestState* r, float* row) const;
  bool accept_sampled(RequestState* r, const generation::SampledToken& token);
  // Samples the rows commit() set aside, then accepts their tokens in commit order.
  void sample_committed();
  // A sequence that will never be forked ends with its parent's outcome.
  void end_unforked(const RequestState& parent, int32_t index, const std::string& id, RequestStatus status,
                    generation::FinishReason reason, const Status& error);
  // One sequence of `group` (a request with num_return_sequences > 1) ended (mu_ held).
  void sequence_ended_locked(const std::string& group);
  void planner_loop();

  std::shared_ptr<ModelRunner> runner_;
  GenerationConfig gc_;
  ContinuousBatchingConfig cfg_;
  ManagerOptions opts_;
  CbResources res_;
  int64_t vocab_ = 0;

  // Loop-thread state.
  std::unique_ptr<PagedKvCache> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unordered_map<std::string, std::unique_ptr<RequestState>> requests_;
  std::unique_ptr<structured::MaskPrefetcher> mask_prefetcher_;  // started by the first constrained step
  std::unique_ptr<StepPlan> next_plan_;  // planned during the previous step (async)
  std::unique_ptr<StepKvView> view_;
  std::vector<SequenceChunk> step_chunks_;  // run_step's, reused
  std::vector<const SequenceKv*> step_seqs_;
  Tensor step_logits_;  // run_model's, a view into the executor's arena until the next step
  uint64_t next_arrival_ = 0;

  // Shared with callers (mu_).
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<RequestState>> incoming_;
  std::vector<std::string> cancels_;
  std::unordered_set<std::string> live_ids_;
  // Requests added with num_return_sequences > 1, until their last sequence ends.
  struct GroupInfo {
    int32_t size = 0;
    int32_t live = 0;
  };
  std::unordered_map<std::string, GroupInfo> groups_;
  int64_t queued_ = 0;  // added and not yet admitted (max_queue_size)
  std::condition_variable queue_cv_;
  int pause_count_ = 0;
  bool paused_ = false;
  bool stop_requested_ = false;
  bool hard_stop_ = false;
  bool keep_cache_ = false;
  bool thread_alive_ = false;
  bool destroyed_ = false;    // no more use; teardown may be pending
  bool torn_down_ = false;    // loop joined, pool freed (destroy_mu_)
  std::thread::id loop_id_;
  std::thread::id delivering_id_;  // register_result_handler handing out queued outputs
  std::unordered_map<std::thread::id, int> pause_holders_;
  std::mutex destroy_mu_;     // one teardown at a time, never taken on the loop thread
  std::optional<Status> fatal_;
  uint64_t auto_id_ = 0;
  bool warned_dropped_processors_ = false;
  std::thread thread_;
  std::mutex join_mu_;

  // Async batching: a helper thread plans step N+1 while the loop computes step N.
  std::thread planner_;
  std::mutex planner_mu_;
  std::condition_variable planner_cv_;
  bool planner_has_job_ = false, planner_done_ = false, planner_quit_ = false;
  StepPlan* planner_target_ = nullptr;
  std::exception_ptr planner_error_;

  // Outputs.
  std::unique_ptr<ResultQueue> results_;
  std::vector<float> fork_row_;  // scratch: each forked sequence samples from its own copy of the logits
  std::vector<std::pair<RequestState*, float*>> to_sample_;  // this step's rows, in commit order
  std::vector<std::pair<PlannedChunk, float*>> to_verify_;   // this step's verification chunks and rows
  std::vector<int32_t> draft_scratch_;
  StepCostModel step_cost_;  // the steps' seconds by rows: whether a draft's rows pay (step_cost.h)
  std::vector<generation::SampleJob> sample_jobs_;
  generation::ParallelSampler sampler_;
  std::recursive_mutex delivery_mu_;
  struct Handler {
    ResultCallback callback;
    Executor executor;
  };
  std::unordered_map<std::string, Handler> handlers_;
  // Streaming requests' cumulative outputs, until their final output (delivery_mu_).
  std::unordered_map<std::string, std::shared_ptr<StreamedOutput>> streams_;

  mutable std::mutex stats_mu_;
  ManagerStats stats_;
  std::atomic<int64_t> generated_total_{0};
};

}  // namespace loom::batching
