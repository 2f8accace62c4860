// Heap allocations of the batching loop's per-token work — sampling a step's rows
// across the pool (ParallelSampler), then each token's finish checks and shown text
// (TokenFinisher) — counted by replacing the global operator new. Its own program
// (not one of loom_batching_tests' files), so no other test runs under the counter.
// After a warm-up the scratch buffers have grown to the vocabulary and the output
// text has its room: the next tokens must allocate nothing. Then a whole manager's
// allocations per decode step, with the fixture model.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <string>
#include <vector>

#include "loom/batching/continuous_batching_manager.h"
#include "loom/batching/model_runner.h"
#include "loom/batching/token_finisher.h"
#include "loom/core/thread_pool.h"
#include "loom/generation/sampling.h"
#include "loom/models/model.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void* counted_alloc(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}

// Allocations made, on any thread, while `fn` runs.
template <typename Fn>
int64_t allocations_during(Fn&& fn) {
  g_allocations.store(0);
  g_counting.store(true);
  fn();
  g_counting.store(false);
  return g_allocations.load();
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace loom::batching {
namespace {

// Text of a token without heap: pieces short enough for the string's own buffer,
// as most tokens' are (a real detokenizer's own work is the tokenizer's to count).
class ShortPieces : public TextStream {
 public:
  Result<std::string> push(int32_t id) override { return std::string(1, static_cast<char>('a' + id % 26)); }
  Result<std::string> flush() override { return std::string(); }
};

struct Sequence {
  generation::SamplingParams params;
  generation::Rng rng;
  std::vector<int32_t> tokens;
  size_t prompt = 0;
  ShortPieces text_stream;
  TokenFinisher finisher;
  std::string text;
};

TEST(TokenPathAllocations, SamplingAndFinishChecksAllocateNothingAfterWarmUp) {
  constexpr int64_t kVocab = 4096;
  constexpr int kSequences = 32, kWarmUp = 4, kMeasured = 64;
  ThreadPool pool(2);
  std::vector<Sequence> seqs(kSequences);
  for (int i = 0; i < kSequences; ++i) {
    Sequence& s = seqs[static_cast<size_t>(i)];
    // Every kind of setting the loop meets: greedy, full-vocabulary top-p, top-k (heap
    // and selection), min-p, penalties over prompt and generated tokens, a bias.
    s.params.do_sample = i % 4 != 0;
    s.params.temperature = 0.8f;
    if (i % 4 == 1) s.params.top_p = 0.95f;
    if (i % 4 == 2) s.params.top_k = i % 8 == 2 ? 40 : 1000;
    if (i % 4 == 3) s.params.min_p = 0.05f;
    if (i % 3 == 0) s.params.repetition_penalty = 1.3f;
    if (i % 5 == 0) s.params.frequency_penalty = 0.5f;
    if (i % 7 == 0) s.params.logit_bias = {{7, 2.0f}};
    s.rng.reseed(static_cast<uint64_t>(i));
    for (int t = 0; t < 20; ++t) s.tokens.push_back((i * 31 + t * 7) % kVocab);
    s.prompt = s.tokens.size();
    s.tokens.reserve(s.prompt + kWarmUp + kMeasured);
    // A stop string that never comes, so the matcher holds back and releases text.
    s.finisher = TokenFinisher({static_cast<int32_t>(kVocab + 1)}, {"zzzz"}, kWarmUp + kMeasured, &s.text_stream);
    s.text.reserve(4 * (kWarmUp + kMeasured));
  }
  std::vector<float> logits(static_cast<size_t>(kSequences * kVocab));
  std::vector<generation::SampleJob> jobs(kSequences);
  generation::ParallelSampler sampler;
  int64_t finished = 0;
  auto step = [&](int n) {
    for (int k = 0; k < n; ++k) {
      for (size_t j = 0; j < logits.size(); ++j) logits[j] = std::sin(0.001f * static_cast<float>(j * (k + 3)));
      for (int i = 0; i < kSequences; ++i) {
        Sequence& s = seqs[static_cast<size_t>(i)];
        jobs[static_cast<size_t>(i)] = {logits.data() + i * kVocab, &s.params, s.tokens, s.prompt, &s.rng, i % 2 == 0, {}};
      }
      sampler.run(jobs, kVocab, pool);
      for (int i = 0; i < kSequences; ++i) {
        Sequence& s = seqs[static_cast<size_t>(i)];
        const int32_t id = jobs[static_cast<size_t>(i)].result.id;
        s.tokens.push_back(id);
        Result<generation::FinishReason> r =
            s.finisher.accept(id, static_cast<int64_t>(s.tokens.size() - s.prompt), nullptr, s.text);
        if (r.ok() && *r != generation::FinishReason::kNone) ++finished;
      }
    }
  };
  step(kWarmUp);
  EXPECT_EQ(allocations_during([&] { step(kMeasured); }), 0);
  EXPECT_EQ(finished, kSequences);  // every sequence reached max_new_tokens on the last step
  for (const Sequence& s : seqs) {  // one letter a token, but for a held-back run of z (at most 3)
    EXPECT_LE(s.text.size(), s.tokens.size() - s.prompt);
    EXPECT_GE(s.text.size() + 3, s.tokens.size() - s.prompt);
  }
}

// The counter counts: a test of the test.
TEST(TokenPathAllocations, CounterSeesAnAllocation) {
  EXPECT_GE(allocations_during([] { std::vector<int>* v = new std::vector<int>(100); delete v; }), 2);
}

}  // namespace
}  // namespace loom::batching

namespace loom::batching {
namespace {

// Allocations of a whole manager run of `sequences` requests of `tokens` tokens each,
// never stopped by EOS, and its steps.
struct ManagerRun {
  int64_t allocations = 0, steps = 0;
};
ManagerRun manager_run(const std::shared_ptr<ModelRunner>& runner, int sequences, int64_t tokens, bool sampled,
                       bool streaming) {
  GenerationConfig gc;
  ContinuousBatchingConfig c;
  c.num_blocks = 256;
  c.page_size = 16;
  // The prefix cache indexes each block as it fills (about ten insertions a step
  // here, by design): off, so that what is counted is the step itself.
  c.allow_block_sharing = false;
  auto m = ContinuousBatchingManager::create(runner, gc, c).value();
  ManagerRun r;
  r.allocations = allocations_during([&] {
    for (int i = 0; i < sequences; ++i) {
      RequestOptions o;
      o.max_new_tokens = tokens;
      o.streaming = streaming;
      o.eos_token_ids = std::vector<int32_t>{};
      o.seed = static_cast<uint64_t>(i);
      if (sampled) {  // full-vocabulary top-p, top-k, min-p and penalties
        o.do_sample = true;
        o.temperature = 0.9f;
        if (i % 3 == 0) o.top_p = 0.9f;
        if (i % 3 == 1) o.top_k = 20;
        if (i % 3 == 2) o.min_p = 0.1f;
        o.repetition_penalty = 1.2f;
        o.frequency_penalty = 0.3f;
      }
      std::vector<int32_t> prompt;
      for (int t = 0; t < 8; ++t) prompt.push_back(3 + (i * 13 + t * 5) % 200);
      (void)m->add_request(prompt, o);
    }
    (void)m->start();
    (void)m->stop(true, 120.0);
  });
  r.steps = m->stats().steps;
  return r;
}

// Allocations a decode step adds: runs of 16 and of 80 tokens, the difference per step.
double per_decode_step(const std::shared_ptr<ModelRunner>& runner, int sequences, bool sampled, bool streaming) {
  const ManagerRun a = manager_run(runner, sequences, 16, sampled, streaming);
  const ManagerRun b = manager_run(runner, sequences, 80, sampled, streaming);
  const double per_step = double(b.allocations - a.allocations) / double(b.steps - a.steps);
  std::printf("%2d sequences, %s, %s: %.1f allocations per decode step\n", sequences, sampled ? "sampled" : "greedy ",
              streaming ? "streamed" : "final only", per_step);
  return per_step;
}

// A whole manager decode step of 32 greedy sequences allocates almost nothing (the
// model step, the scheduler's plan and the finish path reuse their buffers; what is
// left is each request's own growth). Sampling adds less than one allocation for
// every two tokens (measured: about 8 a step of 32, not yet traced), and streaming a
// token costs about a queue entry, not a copy of the request.
TEST(ManagerStepAllocations, SamplingAddsNoneAndStreamingLittle) {
  const auto dir = std::filesystem::path(LOOM_BINARY_DIR) / "fixtures" / "llama-f32";
  auto model = models::Model::load(dir.string()).value();
  static ThreadPool pool(1);
  std::shared_ptr<ModelRunner> runner(ModelRunner::create(model, "cpu", &pool).value().release());
  constexpr int kSequences = 32;
  const double greedy = per_decode_step(runner, kSequences, false, false);
  const double sampled = per_decode_step(runner, kSequences, true, false);
  const double streamed = per_decode_step(runner, kSequences, true, true);
  (void)per_decode_step(runner, 4, false, false);
  EXPECT_LT(greedy, 4.0);
  // An allocation per sampled token would add 32 a step.
  EXPECT_LT(sampled - greedy, 0.5 * kSequences);
  EXPECT_LT(streamed - sampled, 2.0 * kSequences);
}

}  // namespace
}  // namespace loom::batching
