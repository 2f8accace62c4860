// Which requests run in the next step, and how many of their tokens. A step
// has a token budget (max_batch_tokens) and a sequence budget
// (max_requests_per_batch); a long prompt is prefilled in chunks across steps.
// When the KV pool runs out, the latest-arrived running request is preempted —
// swapped to the host pool when one is configured, else released to be
// recomputed (prompt + tokens generated so far) — so the earliest request
// always progresses and no token is lost or produced twice.
//
// Policies (subclasses) only choose the order in which the budget is offered:
//   fifo           decodes first, then prefill chunks in arrival order, then new requests;
//   prefill_first  prefill chunks and new requests first, then decodes.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/batching/paged_kv_cache.h"
#include "loom/batching/request_state.h"
#include "loom/core/status.h"

namespace loom::batching {

struct PlannedChunk {
  RequestState* request = nullptr;
  int64_t start = 0;  // first position fed
  int64_t count = 0;  // positions fed, drafted ones included
  // Speculative decoding: the last `draft` of them are drafted tokens to verify
  // (fed from RequestState::draft_feed); added on the loop thread just before the
  // step runs, never by the planner.
  int64_t draft = 0;
};

struct StepPlan {
  std::vector<PlannedChunk> chunks;
  int64_t num_tokens = 0;
  bool short_of_memory = false;  // a speculative plan left out work that needed a preemption

  bool empty() const { return chunks.empty(); }
  bool contains(const RequestState* r) const;
  // Drops r's chunk; returns whether it had one.
  bool remove(const RequestState* r);
  void add(RequestState* r, int64_t start, int64_t count);
};

struct SchedulerLimits {
  int64_t max_batch_tokens = 256;
  int64_t max_requests_per_batch = 1024;
  double safety_margin = 0.0;          // admit new requests only while more of the pool is available
  int64_t max_blocks_per_request = 0;  // 0: no limit
};

struct SchedulerEvents {
  int64_t preempted_recompute = 0;
  int64_t preempted_swap = 0;
  int64_t resumed_from_swap = 0;
  int64_t admitted = 0;
  int64_t prefix_hit_tokens = 0;  // positions served from the prefix cache at admission
  int64_t prefix_query_tokens = 0;  // positions looked up in the prefix cache at admission
};

class Scheduler {
 public:
  // type: "fifo" | "prefill_first".
  static Result<std::unique_ptr<Scheduler>> create(const std::string& type, PagedKvCache& kv, SchedulerLimits limits);
  virtual ~Scheduler() = default;

  // Queues a request (PENDING) in arrival order.
  void add(RequestState* r);
  // Takes in a request that already holds its K/V (a sequence forked from
  // another one's computed prompt) as running.
  void add_running(RequestState* r);
  // Forgets a request wherever it is (it finished, failed or was cancelled). Its
  // blocks are the caller's to release.
  void remove(RequestState* r);
  // Extends `plan` up to the budgets. `speculative`: planning step N+1 while step
  // N runs (async batching) — requests are seen as they will be after step N
  // (RequestState::next_position), and nothing is preempted: work that would need
  // it is left out and plan.short_of_memory set.
  void schedule(StepPlan& plan, bool speculative);
  // Requests found impossible to serve (longer than the pool or than
  // max_blocks_per_request), with the error to fail them with.
  std::vector<std::pair<RequestState*, Status>> take_rejected();

  const std::vector<RequestState*>& running() const { return running_; }
  const std::deque<RequestState*>& waiting() const { return waiting_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  const SchedulerEvents& events() const { return events_; }
  const SchedulerLimits& limits() const { return limits_; }

 protected:
  Scheduler(PagedKvCache& kv, SchedulerLimits limits) : kv_(kv), limits_(limits) {}
  virtual void fill(StepPlan& plan, bool speculative) = 0;

  // Offer the budget to running requests with one token to feed / with more, in
  // arrival order; then admit waiting requests in arrival order. Each stops when
  // a budget is spent.
  void offer_decodes(StepPlan& plan, bool speculative);
  void offer_prefills(StepPlan& plan, bool speculative);
  void admit_waiting(StepPlan& plan, bool speculative);

 private:
  enum class Outcome { kScheduled, kSkipped, kStop };
  Outcome schedule_running(RequestState* r, StepPlan& plan, bool speculative);
  Outcome admit(RequestState* r, StepPlan& plan, bool speculative);
  void preempt(RequestState* victim, StepPlan& plan);
  bool budget_left(const StepPlan& plan) const;
  void insert_running(RequestState* r);
  void insert_waiting(RequestState* r);
  void reject(RequestState* r, Status why);
  static int64_t pending(const RequestState* r) { return r->projected_length() - r->next_position(); }

  PagedKvCache& kv_;
  SchedulerLimits limits_;
  std::vector<RequestState*> running_;  // arrival order
  std::deque<RequestState*> waiting_;   // arrival order
  std::vector<std::pair<RequestState*, Status>> rejected_;
  SchedulerEvents events_;
};

class FifoScheduler : public Scheduler {
 public:
  FifoScheduler(PagedKvCache& kv, SchedulerLimits limits) : Scheduler(kv, limits) {}

 protected:
  void fill(StepPlan& plan, bool speculative) override;
};

class PrefillFirstScheduler : public Scheduler {
 public:
  PrefillFirstScheduler(PagedKvCache& kv, SchedulerLimits limits) : Scheduler(kv, limits) {}

 protected:
  void fill(StepPlan& plan, bool speculative) override;
};

}  // namespace loom::batching
