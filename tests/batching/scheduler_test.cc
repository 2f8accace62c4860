#include "loom/batching/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

namespace loom::batching {
namespace {

KvCacheLayout two_layers() {
  KvCacheLayout l;
  l.num_layers = 2;
  l.num_kv_heads = 1;
  l.head_dim = 4;
  l.sliding_window = {0, 0};
  return l;
}

struct Bench {
  Bench(int64_t page_size, int64_t num_pages, SchedulerLimits limits, const std::string& type = "fifo",
        int64_t swap_pages = 0) {
    PagedKvCacheOptions o;
    o.page_size = page_size;
    o.num_pages = num_pages;
    o.block_sharing = false;
    o.swap_pages = swap_pages;
    o.max_step_tokens = limits.max_batch_tokens;
    kv = std::make_unique<PagedKvCache>(two_layers(), o);
    sched = Scheduler::create(type, *kv, limits).value();
  }
  RequestState* add(int prompt_len, int max_new = 4) {
    auto r = std::make_unique<RequestState>();
    r->id = "r" + std::to_string(reqs.size());
    r->arrival = reqs.size();
    r->prompt.assign(static_cast<size_t>(prompt_len), 7);
    r->tokens = r->prompt;
    r->max_new_tokens = max_new;
    r->max_length = prompt_len + max_new;
    reqs.push_back(std::move(r));
    sched->add(reqs.back().get());
    return reqs.back().get();
  }
  // Plans a step and applies it as the manager would (a sampled token is always 1).
  StepPlan step() {
    StepPlan plan;
    sched->schedule(plan, false);
    for (const PlannedChunk& c : plan.chunks) {
      EXPECT_EQ(c.start, c.request->num_computed) << c.request->id;
      c.request->num_computed += c.count;
      if (c.request->num_computed == static_cast<int64_t>(c.request->tokens.size())) c.request->tokens.push_back(1);
    }
    return plan;
  }
  int64_t planned(const StepPlan& p, const RequestState* r) {
    for (const auto& c : p.chunks)
      if (c.request == r) return c.count;
    return 0;
  }
  std::unique_ptr<PagedKvCache> kv;
  std::unique_ptr<Scheduler> sched;
  std::vector<std::unique_ptr<RequestState>> reqs;
};

TEST(Scheduler, ChunksALongPromptToTheTokenBudget) {
  Bench b(4, 200, {32, 16, 0.0, 0});
  RequestState* r = b.add(100);
  std::vector<int64_t> counts;
  for (int i = 0; i < 6; ++i) counts.push_back(b.planned(b.step(), r));
  EXPECT_EQ(counts, (std::vector<int64_t>{32, 32, 32, 4, 1, 1}));
  EXPECT_EQ(r->generated(), 3);
}

TEST(Scheduler, FifoServesDecodesFirst) {
  Bench b(4, 200, {16, 16, 0.0, 0}, "fifo");
  RequestState* a = b.add(2);
  RequestState* c = b.add(50);
  StepPlan p1 = b.step();
  EXPECT_EQ(b.planned(p1, a), 2);
  EXPECT_EQ(b.planned(p1, c), 14);
  StepPlan p2 = b.step();
  EXPECT_EQ(b.planned(p2, a), 1);  // decode first
  EXPECT_EQ(b.planned(p2, c), 15);
  EXPECT_EQ(p2.chunks.front().request, a);
}

TEST(Scheduler, PrefillFirstServesPromptsFirst) {
  Bench b(4, 200, {16, 16, 0.0, 0}, "prefill_first");
  RequestState* a = b.add(2);
  RequestState* c = b.add(50);
  b.step();
  StepPlan p2 = b.step();
  EXPECT_EQ(b.planned(p2, c), 16);
  EXPECT_EQ(b.planned(p2, a), 0);  // the budget went to the prompt
  EXPECT_EQ(p2.chunks.front().request, c);
}

TEST(Scheduler, PreemptsTheLatestArrivalAndLosesNoToken) {
  // 8 pages of 2 layers = 4 logical pages of 4 positions: 16 positions in all.
  Bench b(4, 8, {64, 16, 0.0, 0});
  RequestState* first = b.add(6, 6);
  RequestState* second = b.add(6, 6);
  int preempted_at = -1;
  std::vector<int32_t> second_tokens;
  for (int step = 0; step < 40 && !(first->generated() >= 6 && second->generated() >= 6); ++step) {
    if (second->status == RequestStatus::kPending && preempted_at < 0 && second->generated() > 0) {
      preempted_at = step;
      second_tokens = second->tokens;
      EXPECT_EQ(second->num_computed, 0);  // recompute: back to nothing cached
    }
    StepPlan p = b.step();
    for (RequestState* r : {first, second})
      if (r->generated() >= 6 && r->status != RequestStatus::kFinished) {
        b.sched->remove(r);
        b.kv->release(r->kv);
        r->status = RequestStatus::kFinished;
      }
    EXPECT_LE(b.kv->pool().used_pages(), b.kv->capacity_pages());
  }
  EXPECT_GE(preempted_at, 0);
  EXPECT_EQ(b.sched->events().preempted_recompute, 1);
  EXPECT_EQ(first->generated(), 6);
  EXPECT_EQ(second->generated(), 6);
  // What the preempted request had generated is still there, in order.
  EXPECT_TRUE(std::equal(second_tokens.begin(), second_tokens.end(), second->tokens.begin()));
  EXPECT_EQ(b.kv->pool().used_pages(), 0);
}

TEST(Scheduler, SwapsTheVictimWhenAHostPoolExists) {
  Bench b(4, 8, {64, 16, 0.0, 0}, "fifo", /*swap_pages=*/16);
  RequestState* first = b.add(6, 6);
  RequestState* second = b.add(6, 6);
  bool saw_swapped = false;
  for (int step = 0; step < 40; ++step) {
    b.step();
    if (second->kv.swapped) {
      saw_swapped = true;
      EXPECT_GT(second->num_computed, 0);  // its K/V is kept, not recomputed
    }
    if (first->generated() >= 6 && first->status != RequestStatus::kFinished) {
      b.sched->remove(first);
      b.kv->release(first->kv);
      first->status = RequestStatus::kFinished;
    }
    if (second->generated() >= 6) break;
  }
  EXPECT_TRUE(saw_swapped);
  EXPECT_EQ(b.sched->events().preempted_swap, 1);
  EXPECT_EQ(b.sched->events().resumed_from_swap, 1);
  EXPECT_EQ(b.sched->events().preempted_recompute, 0);
  EXPECT_EQ(second->generated(), 6);
}

TEST(Scheduler, SafetyMarginHoldsBackNewRequests) {
  Bench b(4, 20, {64, 16, 0.5, 0});
  RequestState* a = b.add(24, 1);  // 6 logical pages = 12 of 20 pages: 40% left
  RequestState* c = b.add(2, 1);
  StepPlan p = b.step();
  EXPECT_EQ(b.planned(p, a), 24);
  EXPECT_EQ(b.planned(p, c), 0);
  EXPECT_EQ(c->status, RequestStatus::kPending);
}

TEST(Scheduler, RejectsRequestsThatCanNeverFit) {
  Bench b(4, 8, {64, 16, 0.0, 3});
  RequestState* big = b.add(20, 4);      // 6 logical pages > the pool's 4
  RequestState* blocks = b.add(10, 4);   // 4 blocks > max_blocks_per_request 3
  RequestState* ok = b.add(3, 2);
  StepPlan p = b.step();
  auto rejected = b.sched->take_rejected();
  ASSERT_EQ(rejected.size(), 2u);
  EXPECT_EQ(rejected[0].first, big);
  EXPECT_EQ(rejected[0].second.code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(rejected[0].second.message().find("num_blocks"), std::string::npos);
  EXPECT_EQ(rejected[1].first, blocks);
  EXPECT_NE(rejected[1].second.message().find("max_blocks_per_request"), std::string::npos);
  EXPECT_EQ(b.planned(p, ok), 3);
}

TEST(Scheduler, UnknownTypeIsAnError) {
  PagedKvCacheOptions o;
  o.page_size = 4;
  o.num_pages = 4;
  PagedKvCache kv(two_layers(), o);
  EXPECT_EQ(Scheduler::create("lifo", kv, {}).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::batching
