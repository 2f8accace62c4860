// Masks computed ahead on the MaskPrefetcher's worker are the masks the requesting
// thread would compute itself; a request for a mask being computed waits for it
// instead of computing it twice; a request for one not started computes it.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <set>
#include <thread>

#include "loom/structured/constraint.h"
#include "loom/structured/mask_prefetcher.h"
#include "loom/tokenizer/tokenizer.h"
#include "structured/structured_test_util.h"

namespace loom::structured {
namespace {

std::shared_ptr<Constraint> compile_schema(const std::shared_ptr<const TokenVocabulary>& vocab) {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kJsonSchema;
  spec.text = test::read_text(test::source_path("tests/structured/schemas/config_pipeline.json"));
  return Constraint::compile(spec, vocab).value();
}

// States along a seeded random walk, and the mask of each computed without the cache
// (compute_mask leaves the mask cache empty). States belong to the constraint's own
// automaton (stack ids are per grammar), so the same constraint is tested after.
struct Walk {
  std::vector<AutomatonState> states;
  std::vector<Constraint::Mask> masks;
};

Walk random_walk(const std::shared_ptr<Constraint>& reference, size_t steps) {
  const auto& vocab = reference->vocabulary();
  ConstraintState st(reference);
  std::mt19937 rng(11);
  Walk w;
  for (size_t i = 0; i < steps && st.can_continue(); ++i) {
    Constraint::Mask m;
    reference->compute_mask(st.state(), &m);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab->size(); ++id)
      if ((m[id >> 6] >> (id & 63)) & 1) allowed.push_back(id);
    w.states.push_back(st.state());
    w.masks.push_back(m);
    if (allowed.empty()) break;
    EXPECT_TRUE(st.accept_token(allowed[rng() % allowed.size()]).ok());
  }
  return w;
}

TEST(MaskPrefetch, WorkerMasksEqualTheRequestingThreadsOwn) {
  auto tok = Tokenizer::from_file(test::source_path("models/loom-kjv-tiny/tokenizer.json")).value();
  auto vocab = TokenVocabulary::from_tokenizer(*tok);
  auto fresh = compile_schema(vocab);
  const Walk w = random_walk(fresh, 40);
  ASSERT_GT(w.states.size(), 10u);
  ASSERT_EQ(fresh->cache_stats().misses + fresh->cache_stats().hits, 0u);
  {
    MaskPrefetcher prefetcher;
    std::vector<MaskPrefetcher::Job> jobs;
    for (const auto& s : w.states) jobs.push_back({fresh, s});
    prefetcher.submit(std::move(jobs));
    // Asked for in the reverse order: the last states are likely not started yet
    // (computed here), the first ones done or in progress on the worker.
    for (size_t i = w.states.size(); i-- > 0;) EXPECT_EQ(*fresh->mask(w.states[i]), w.masks[i]) << "step " << i;
  }
  const MaskCacheStats s = fresh->cache_stats();
  // Each distinct state computed once, by one thread or the other.
  std::set<AutomatonState> distinct(w.states.begin(), w.states.end());
  EXPECT_EQ(s.misses + s.prefetched + s.precomputed, distinct.size());  // (the start state by the compilation)
  EXPECT_EQ(s.hits + s.misses, w.states.size());
}

TEST(MaskPrefetch, ManyThreadsAskingForTheSameStatesAgree) {
  auto tok = Tokenizer::from_file(test::source_path("models/loom-kjv-tiny/tokenizer.json")).value();
  auto vocab = TokenVocabulary::from_tokenizer(*tok);
  auto fresh = compile_schema(vocab);
  const Walk w = random_walk(fresh, 30);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < w.states.size(); ++k) {
        const size_t i = (k * (t + 1) + t) % w.states.size();
        if (t % 2) fresh->prefetch(w.states[i]);
        if (*fresh->mask(w.states[i]) != w.masks[i]) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  std::set<AutomatonState> distinct(w.states.begin(), w.states.end());
  const MaskCacheStats s = fresh->cache_stats();
  EXPECT_EQ(s.misses + s.prefetched + s.precomputed, distinct.size());  // (the start state by the compilation)
}

}  // namespace
}  // namespace loom::structured
