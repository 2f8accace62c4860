// A decode step allocates nothing once its shape has been seen: this binary
// replaces malloc and its relatives (operator new, aligned_alloc and std::vector
// all end there) with counting wrappers over glibc's own, and runs
// ModelRunner::step_into on the bundled model after warm-up steps. It is a binary
// of its own so the wrappers interpose on nothing else.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "loom/batching/model_runner.h"
#include "loom/models/model.h"
#include "loom/runtime/kv_cache_contiguous.h"

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
}

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
}  // namespace
// To find what allocated: gdb -ex 'break loom_counted_allocation' on this binary.
extern "C" __attribute__((noinline)) void loom_counted_allocation() { asm volatile(""); }
namespace {
inline void note() {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  loom_counted_allocation();
}
}  // namespace

extern "C" {
void* malloc(size_t n) noexcept {
  note();
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t size) noexcept {
  note();
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) noexcept {
  note();
  return __libc_realloc(p, n);
}
void* memalign(size_t align, size_t n) noexcept {
  note();
  return __libc_memalign(align, n);
}
void* aligned_alloc(size_t align, size_t n) noexcept {
  note();
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, size_t align, size_t n) noexcept {
  note();
  void* p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}

namespace loom {
namespace {

namespace fs = std::filesystem;

const fs::path kModel = fs::path(LOOM_SOURCE_DIR) / "models" / "loom-kjv-tiny";

// Allocations made by anything during fn (workers included).
template <class F>
int64_t allocations_during(F&& fn) {
  g_allocations.store(0);
  g_counting.store(true);
  fn();
  g_counting.store(false);
  return g_allocations.load();
}

std::vector<int>* volatile g_sink_vector;
void* volatile g_sink;

TEST(StepAllocations, TheCounterSeesAllocations) {
  const int64_t n = allocations_during([] {
    g_sink_vector = new std::vector<int>(100);  // two: the vector and its elements
    delete g_sink_vector;
    g_sink = std::aligned_alloc(64, 256);
    std::free(g_sink);
  });
  EXPECT_EQ(n, 3);
}

// Decodes `sequences` sequences a token at a time: warm-up steps (the first of a
// shape plans it), then counts the allocations of the next steps.
void expect_no_allocations(int threads, int sequences) {
  std::shared_ptr<const models::Model> model = models::Model::load(kModel.string()).value();
  ThreadPool pool(threads);
  auto runner = batching::ModelRunner::create(model, "cpu", &pool).value();
  constexpr int64_t kPrompt = 8, kWarmup = 4, kCounted = 16;
  runtime::ContiguousKvCache cache(runner->kv_layout(), sequences, kPrompt + kWarmup + kCounted + 1);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(sequences));
  std::vector<batching::SequenceChunk> chunks;
  for (int s = 0; s < sequences; ++s) {
    for (int64_t i = 0; i < kPrompt; ++i) prompts[static_cast<size_t>(s)].push_back(static_cast<int32_t>((s * 37 + i * 11) % 4000));
    chunks.push_back({prompts[static_cast<size_t>(s)].data(), kPrompt, 0});
  }
  Tensor logits;
  ASSERT_TRUE(runner->step_into(chunks, cache, batching::LogitsRows::kLastOfEachSequence, &logits).ok());
  std::vector<int32_t> next(static_cast<size_t>(sequences));
  int64_t past = kPrompt;
  auto decode = [&]() -> Status {
    const int64_t vocab = logits.dim(1);
    for (int s = 0; s < sequences; ++s) {
      const float* l = logits.data_as<float>() + s * vocab;
      int32_t best = 0;
      for (int64_t j = 1; j < vocab; ++j)
        if (l[j] > l[best]) best = static_cast<int32_t>(j);
      next[static_cast<size_t>(s)] = best;
      chunks[static_cast<size_t>(s)] = {&next[static_cast<size_t>(s)], 1, past};
    }
    ++past;
    return runner->step_into(chunks, cache, batching::LogitsRows::kLastOfEachSequence, &logits);
  };
  for (int64_t i = 0; i < kWarmup; ++i) ASSERT_TRUE(decode().ok());
  Status st;
  const int64_t n = allocations_during([&] {
    for (int64_t i = 0; i < kCounted && st.ok(); ++i) st = decode();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(logits.dim(0), sequences);
  EXPECT_EQ(n, 0) << kCounted << " decode steps of " << sequences << " sequences on " << threads << " threads";
}

TEST(StepAllocations, BatchOfOneOnOneThread) { expect_no_allocations(1, 1); }
TEST(StepAllocations, BatchOfOneOnTwoThreads) { expect_no_allocations(2, 1); }
TEST(StepAllocations, ThirtyTwoSequencesOnOneThread) { expect_no_allocations(1, 32); }
TEST(StepAllocations, ThirtyTwoSequencesOnTwoThreads) { expect_no_allocations(2, 32); }

}  // namespace
}  // namespace loom
