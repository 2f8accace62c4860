#include "loom/batching/scheduler.h"

#include <algorithm>

namespace loom::batching {

bool StepPlan::contains(const RequestState* r) const {
  return std::any_of(chunks.begin(), chunks.end(), [r](const PlannedChunk& c) { return c.request == r; });
}

bool StepPlan::remove(const RequestState* r) {
  for (auto it = chunks.begin(); it != chunks.end(); ++it) {
    if (it->request == r) {
      num_tokens -= it->count;
      chunks.erase(it);
      return true;
    }
  }
  return false;
}

void StepPlan::add(RequestState* r, int64_t start, int64_t count) {
  chunks.push_back({r, start, count});
  num_tokens += count;
}

Result<std::unique_ptr<Scheduler>> Scheduler::create(const std::string& type, PagedKvCache& kv, SchedulerLimits limits) {
  if (limits.max_batch_tokens < 1 || limits.max_requests_per_batch < 1)
    return invalid_argument("scheduler: max_batch_tokens and max_requests_per_batch must be ≥ 1");
  if (type == "fifo") return std::unique_ptr<Scheduler>(new FifoScheduler(kv, limits));
  if (type == "prefill_first") return std::unique_ptr<Scheduler>(new PrefillFirstScheduler(kv, limits));
  return invalid_argument("unknown scheduler_type '" + type + "' (fifo, prefill_first)");
}

namespace {
bool by_arrival(const RequestState* a, const RequestState* b) { return a->arrival < b->arrival; }
}  // namespace

void Scheduler::insert_running(RequestState* r) {
  running_.insert(std::upper_bound(running_.begin(), running_.end(), r, by_arrival), r);
}

void Scheduler::insert_waiting(RequestState* r) {
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), r, by_arrival), r);
}

void Scheduler::add(RequestState* r) {
  r->status = RequestStatus::kPending;
  insert_waiting(r);
}

void Scheduler::add_running(RequestState* r) { insert_running(r); }

void Scheduler::remove(RequestState* r) {
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r), waiting_.end());
}

std::vector<std::pair<RequestState*, Status>> Scheduler::take_rejected() {
  std::vector<std::pair<RequestState*, Status>> out;
  out.swap(rejected_);
  return out;
}

void Scheduler::reject(RequestState* r, Status why) {
  remove(r);
  rejected_.emplace_back(r, std::move(why));
}

bool Scheduler::budget_left(const StepPlan& plan) const {
  return plan.num_tokens < limits_.max_batch_tokens &&
         static_cast<int64_t>(plan.chunks.size()) < limits_.max_requests_per_batch;
}

void Scheduler::schedule(StepPlan& plan, bool speculative) {
  if (!budget_left(plan)) return;
  fill(plan, speculative);
}

void Scheduler::offer_decodes(StepPlan& plan, bool speculative) {
  // Preemption edits running_: iterate over a copy.
  const std::vector<RequestState*> order = running_;
  for (RequestState* r : order) {
    if (!budget_left(plan)) return;
    if (std::find(running_.begin(), running_.end(), r) == running_.end() || pending(r) != 1) continue;
    if (schedule_running(r, plan, speculative) == Outcome::kStop) return;
  }
}

void Scheduler::offer_prefills(StepPlan& plan, bool speculative) {
  const std::vector<RequestState*> order = running_;
  for (RequestState* r : order) {
    if (!budget_left(plan)) return;
    if (std::find(running_.begin(), running_.end(), r) == running_.end() || pending(r) <= 1) continue;
    if (schedule_running(r, plan, speculative) == Outcome::kStop) return;
  }
}

void Scheduler::admit_waiting(StepPlan& plan, bool speculative) {
  while (!waiting_.empty() && budget_left(plan)) {
    RequestState* r = waiting_.front();
    const Outcome o = admit(r, plan, speculative);
    if (o == Outcome::kStop) return;
  }
}

Scheduler::Outcome Scheduler::schedule_running(RequestState* r, StepPlan& plan, bool speculative) {
  if (plan.contains(r)) return Outcome::kSkipped;
  if (speculative && r->projected_done()) return Outcome::kSkipped;
  const int64_t start = r->next_position();
  const int64_t todo = pending(r);
  if (todo <= 0) return Outcome::kSkipped;
  const int64_t want = std::min(todo, limits_.max_batch_tokens - plan.num_tokens);
  if (want <= 0) return Outcome::kStop;
  while (true) {
    const int64_t fit = kv_.max_fit(r->kv, start, want);
    if (fit == want || (fit > 0 && todo > 1)) {
      if (!kv_.ensure(r->kv, start + fit)) throw Error(internal_error("scheduler: max_fit promised pages ensure() could not give"));
      plan.add(r, start, fit);
      r->status = todo > 1 || r->generated() == 0 ? RequestStatus::kPrefilling : RequestStatus::kDecoding;
      return Outcome::kScheduled;
    }
    if (speculative) {
      plan.short_of_memory = true;
      return Outcome::kSkipped;
    }
    // The latest-arrived other running request makes room; if r is the latest, r yields.
    RequestState* victim = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      if (*it != r && (*it)->arrival > r->arrival) {
        victim = *it;
        break;
      }
    }
    if (victim) {
      preempt(victim, plan);
      continue;
    }
    if (running_.size() == 1) {  // alone and still short: admission should have rejected it
      kv_.release(r->kv);
      reject(r, resource_exhausted("request '" + r->id + "' does not fit in the KV pool (" +
                                   std::to_string(kv_.capacity_pages()) + " pages) even alone"));
      return Outcome::kSkipped;
    }
    // Every other running request arrived earlier. Yield to an earlier request
    // waiting for memory; otherwise keep the pages and wait for a later step
    // (an earlier request may still preempt us).
    if (!waiting_.empty() && waiting_.front()->arrival < r->arrival) preempt(r, plan);
    return Outcome::kSkipped;
  }
}

void Scheduler::preempt(RequestState* victim, StepPlan& plan) {
  if (victim->inflight != 0) throw Error(internal_error("scheduler: preempting a request whose step is running"));
  plan.remove(victim);
  kv_.trim(victim->kv, victim->num_computed);
  if (kv_.can_swap() && victim->num_computed > 0 && kv_.swap_out(victim->kv)) {
    ++events_.preempted_swap;
  } else {
    kv_.release(victim->kv);
    victim->num_computed = 0;
    ++events_.preempted_recompute;
  }
  victim->status = RequestStatus::kPending;
  running_.erase(std::remove(running_.begin(), running_.end(), victim), running_.end());
  insert_waiting(victim);
}

Scheduler::Outcome Scheduler::admit(RequestState* r, StepPlan& plan, bool speculative) {
  if (static_cast<int64_t>(running_.size()) >= limits_.max_requests_per_batch) return Outcome::kStop;
  if (!running_.empty() &&
      static_cast<double>(kv_.available_pages()) <= limits_.safety_margin * static_cast<double>(kv_.capacity_pages()))
    return Outcome::kStop;

  if (r->kv.swapped) {
    if (!kv_.swap_in(r->kv)) {
      if (speculative) plan.short_of_memory = true;
      return Outcome::kStop;
    }
    ++events_.resumed_from_swap;
    waiting_.pop_front();
    insert_running(r);
    r->status = r->generated() > 0 ? RequestStatus::kDecoding : RequestStatus::kPrefilling;
    schedule_running(r, plan, speculative);
    return Outcome::kScheduled;
  }

  // A request that could never fit fails alone, now, rather than stall the queue.
  const int64_t need = kv_.pages_for_length(r->max_length);
  if (need > kv_.capacity_pages()) {
    reject(r, resource_exhausted("request '" + r->id + "' needs up to " + std::to_string(need) +
                                 " KV pages (prompt " + std::to_string(r->prompt.size()) + " + max_new_tokens " +
                                 std::to_string(r->max_new_tokens) + " tokens) but the pool has " +
                                 std::to_string(kv_.capacity_pages()) + ": raise num_blocks or lower max_new_tokens"));
    return Outcome::kSkipped;
  }
  const int64_t max_blocks = (r->max_length + kv_.page_size() - 1) / kv_.page_size();
  if (limits_.max_blocks_per_request > 0 && max_blocks > limits_.max_blocks_per_request) {
    reject(r, resource_exhausted("request '" + r->id + "' may need " + std::to_string(max_blocks) +
                                 " blocks, more than max_blocks_per_request = " +
                                 std::to_string(limits_.max_blocks_per_request)));
    return Outcome::kSkipped;
  }

  // A request that wants its prompt's log-probabilities computes every prompt position.
  const bool use_prefix_cache = !r->needs_prompt_rows();
  const int64_t hit = use_prefix_cache ? kv_.match_prefix(r->kv, r->tokens) : 0;
  const int64_t todo = static_cast<int64_t>(r->tokens.size()) - hit;
  const int64_t want = std::min(todo, limits_.max_batch_tokens - plan.num_tokens);
  // Admitted only if its whole prompt fits now (alone, it always does): a
  // request that could not finish its prefill would only be preempted again.
  // (pages_for_length counts a sliding layer's ring, not the whole prompt.)
  const bool prompt_fits =
      running_.empty() || kv_.pages_for_length(static_cast<int64_t>(r->tokens.size())) - kv_.held_pages(r->kv) <=
                              kv_.available_pages();
  const int64_t fit = prompt_fits ? kv_.max_fit(r->kv, hit, want) : 0;
  if (want <= 0 || fit == 0) {
    kv_.release(r->kv);
    if (speculative && fit == 0) plan.short_of_memory = true;
    return Outcome::kStop;
  }
  if (!kv_.ensure(r->kv, hit + fit)) throw Error(internal_error("scheduler: max_fit promised pages ensure() could not give"));
  r->num_computed = hit;
  events_.prefix_hit_tokens += hit;
  if (use_prefix_cache) events_.prefix_query_tokens += static_cast<int64_t>(r->tokens.size());
  ++events_.admitted;
  waiting_.pop_front();
  insert_running(r);
  plan.add(r, hit, fit);
  r->status = todo > 1 || r->generated() == 0 ? RequestStatus::kPrefilling : RequestStatus::kDecoding;
  return Outcome::kScheduled;
}

}  // namespace loom::batching
