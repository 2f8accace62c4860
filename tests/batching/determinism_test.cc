// A request's greedy tokens do not depend on how it was batched: under every
// scheduling condition below, each request of a mixed batch generates exactly
// what it generates alone through batching::generate.
//
// Exact equality needs arithmetic that is the same for a row whatever else is in
// the step; the optimized backend's kernels are built that way (matmul rows
// accumulate in a fixed k order, attention chunks start at absolute positions),
// so the matrix runs on it: paging, chunking, prefix sharing, preemption,
// swapping and async planning never change what a request computes.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <random>

#include "batching_test_util.h"
#include "loom/runtime/cpu/matmul.h"
#include "loom/weights/quantization_recipe.h"

namespace loom::batching {
namespace {

using testing::alone;
using testing::load_fixture;
using testing::make_runner;
using testing::random_tokens;

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> max_new;
};

// Mixed lengths; a few prompts share long prefixes so that prefix caching and
// deduplication have something to do.
Workload make_workload(int n, int64_t max_prompt, int64_t max_gen, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  Workload w;
  const std::vector<int32_t> shared = random_tokens(rng, max_prompt / 2, vocab);
  for (int i = 0; i < n; ++i) {
    const int64_t len = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(max_prompt));
    std::vector<int32_t> p = random_tokens(rng, len, vocab);
    if (i % 4 == 1) std::copy(shared.begin(), shared.begin() + std::min<int64_t>(len, static_cast<int64_t>(shared.size())), p.begin());
    if (i % 8 == 3 && i > 0) p = w.prompts[static_cast<size_t>(i - 2)];  // an exact duplicate
    w.prompts.push_back(std::move(p));
    w.max_new.push_back(1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(max_gen)));
  }
  return w;
}

struct Condition {
  const char* name;
  int64_t page_size;
  int64_t num_blocks;
  int64_t max_batch_tokens;
  bool sharing;
  double offload_gib;
  const char* scheduler;
  bool async;
  // < 0: the scheduler's default (0.2 for fifo). A tight pool uses 0 so that
  // fifo admits as much as fits and running requests must preempt to grow.
  double safety_margin = -1;
  const char* offload_path = nullptr;  // file-backed swap pool (a directory) instead of RAM
  const char* kv_cache_dtype = "float32";
};

void run_condition(const std::shared_ptr<ModelRunner>& runner, const Workload& w,
                   const std::vector<std::vector<int32_t>>& expected, const Condition& c,
                   bool expect_preemption) {
  SCOPED_TRACE(c.name);
  ContinuousBatchingConfig cfg;
  cfg.page_size = c.page_size;
  cfg.num_blocks = c.num_blocks;
  cfg.max_batch_tokens = c.max_batch_tokens;
  cfg.allow_block_sharing = c.sharing;
  cfg.cpu_offload_space = c.offload_gib;
  cfg.scheduler_type = c.scheduler;
  cfg.use_async_batching = c.async;
  if (c.safety_margin >= 0) cfg.safety_margin = c.safety_margin;
  if (c.offload_path) cfg.cpu_offload_path = c.offload_path;
  cfg.kv_cache_dtype = c.kv_cache_dtype;
  auto m = ContinuousBatchingManager::create(runner, testing::no_eos_config(), cfg).value();
  // Where preemption is checked, every request is queued before the loop starts: fed one at
  // a time by a thread that may lose its core (ctest runs suites in parallel), a tight pool
  // can drain as fast as it fills and never run out.
  if (!expect_preemption) ASSERT_TRUE(m->start().ok());
  std::map<std::string, size_t> index;
  std::map<std::string, size_t> streamed;  // outputs seen so far per streaming request
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    RequestOptions o;
    o.max_new_tokens = w.max_new[i];
    o.request_id = "q" + std::to_string(i);
    o.streaming = i % 3 == 0;  // must see each token exactly once, preemptions or not
    index[m->add_request(w.prompts[i], o).value()] = i;
  }
  if (expect_preemption) ASSERT_TRUE(m->start().ok());
  for (size_t done = 0; done < w.prompts.size();) {
    std::optional<GenerationOutput> out = m->get_result(std::nullopt, 120.0);
    ASSERT_TRUE(out.has_value()) << "timed out after " << done << " results";
    const size_t i = index.at(out->request_id);
    if (i % 3 == 0) {
      const size_t k = ++streamed[out->request_id];
      ASSERT_EQ(out->generated_tokens.size(), k) << out->request_id;
      EXPECT_TRUE(std::equal(out->generated_tokens.begin(), out->generated_tokens.end(), expected[i].begin()));
      if (!out->is_final()) continue;
    }
    ++done;
    ASSERT_EQ(out->status, RequestStatus::kFinished) << out->request_id << ": " << out->error;
    EXPECT_EQ(out->prompt_ids, w.prompts[i]);
    EXPECT_EQ(out->generated_tokens, expected[i]) << out->request_id << " (prompt " << w.prompts[i].size() << ")";
  }
  ASSERT_TRUE(m->stop(true, 30.0, /*keep_for_next_session=*/true).ok());
  const ManagerStats s = m->stats();
  EXPECT_LE(s.peak_pages_in_use, s.pages_capacity);
  EXPECT_EQ(s.pages_in_use, s.cached_pages);  // nothing held but cached prefixes
  EXPECT_EQ(s.swap_pages_in_use, 0);
  if (expect_preemption) EXPECT_GT(s.preempted_recompute + s.preempted_swap, 0);
  if (c.offload_gib > 0 && expect_preemption) EXPECT_GT(s.preempted_swap, 0);
  if (c.offload_gib == 0) EXPECT_EQ(s.preempted_swap, 0);
  EXPECT_FALSE(m->fatal_error().has_value());
}

std::vector<std::vector<int32_t>> run_alone(ModelRunner& runner, const Workload& w) {
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < w.prompts.size(); ++i) out.push_back(alone(runner, w.prompts[i], w.max_new[i]));
  return out;
}

TEST(Determinism, FullAttentionMatchesRunningAlone) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  // The workload: 64 requests, prompts of 1–600 tokens.
  const Workload w = make_workload(64, 600, 40, model->vocab_size(), 1234);
  const auto expected = run_alone(*runner, w);
  // Each condition of the issue appears at least once: page_size 16 and 256,
  // sharing on/off, max_batch_tokens 32, a pool too small for the batch (with
  // recompute, with swap), fifo and prefill_first, async on and off.
  const Condition conditions[] = {
      {"page16 sharing fifo sync", 16, 2400, 256, true, 0.0, "fifo", false},
      {"page256 no-sharing prefill_first async", 256, 160, 256, false, 0.0, "prefill_first", true},
      {"page16 mbt32 sharing fifo async", 16, 2400, 32, true, 0.0, "fifo", true},
  };
  for (const Condition& c : conditions) run_condition(runner, w, expected, c, false);
  // 48 blocks of 16 positions (768): the longest request (≤ 612) fits, two long
  // ones do not; preemption is certain.
  const Condition tight[] = {
      {"tiny pool recompute fifo async", 16, 48, 64, true, 0.0, "fifo", true, 0.0},
      {"tiny pool swap prefill_first sync", 16, 48, 64, false, 1.0 / 16, "prefill_first", false},
      {"tiny pool file swap fifo async no-sharing", 16, 48, 48, false, 1.0 / 16, "fifo", true, 0.0, "/tmp"},
      {"tiny pool recompute prefill_first sync page8", 8, 90, 32, true, 0.0, "prefill_first", false},
  };
  for (const Condition& c : tight) run_condition(runner, w, expected, c, true);
}

// A bf16 KV cache rounds K/V once when written, so its reference is each request run alone
// through generate() with a bf16 contiguous cache (the independent path the f32 tests use),
// not generate()'s f32 cache. Batching, chunking, preemption by recompute and by swap (which
// copies bf16 pages out and back) must not change a token.
std::vector<std::vector<int32_t>> run_alone_bf16_kv(ModelRunner& runner, const Workload& w) {
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < w.prompts.size(); ++i)
    out.push_back(alone(runner, w.prompts[i], w.max_new[i], {}, DType::kBF16));
  return out;
}

TEST(Determinism, Bf16KvCacheMatchesRunningAloneWithIt) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  const Workload w = make_workload(24, 300, 24, model->vocab_size(), 4321);
  const auto expected = run_alone_bf16_kv(*runner, w);
  // bf16 K/V is a rounding of the f32 cache, not a misreading of it: most requests' first
  // tokens agree with generate()'s f32 run (a garbled cache would agree by chance only).
  const auto f32 = run_alone(*runner, w);
  int same_first = 0;
  for (size_t i = 0; i < w.prompts.size(); ++i)
    same_first += !expected[i].empty() && !f32[i].empty() && expected[i][0] == f32[i][0];
  std::cerr << "bf16 KV: " << same_first << " of " << w.prompts.size() << " first tokens as with f32\n";
  EXPECT_GE(same_first, static_cast<int>(w.prompts.size()) * 3 / 4);
  Condition batched{"bf16 page16 mbt32 sharing fifo async", 16, 1200, 32, true, 0.0, "fifo", true};
  batched.kv_cache_dtype = "bfloat16";
  run_condition(runner, w, expected, batched, false);
  Condition recompute{"bf16 tiny pool recompute prefill_first", 16, 24, 64, true, 0.0, "prefill_first", false, 0.0};
  recompute.kv_cache_dtype = "bfloat16";
  run_condition(runner, w, expected, recompute, true);
  Condition swap{"bf16 tiny pool swap fifo async", 16, 24, 64, false, 1.0 / 16, "fifo", true, 0.0};
  swap.kv_cache_dtype = "bfloat16";
  run_condition(runner, w, expected, swap, true);
}

// Every KV cache type: each request run alone through generate() with a contiguous cache of the
// type (rotated as kv_cache_rotation "auto" does: q4_0) is the reference; batching, chunked
// prefill, prefix sharing, preemption by recompute and by swap (which copies the quantized
// pages out and back: their byte size follows the type) must not change a token.
TEST(Determinism, EveryKvCacheTypeMatchesRunningAloneWithIt) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model);
  const Workload w = make_workload(24, 300, 24, model->vocab_size(), 4321);
  const auto f32 = run_alone(*runner, w);
  for (const char* kv : {"float16", "q8_0", "q4_0"}) {
    SCOPED_TRACE(kv);
    const DType t = kv_cache_dtype_from_name(kv).value();
    std::vector<std::vector<int32_t>> expected;
    for (size_t i = 0; i < w.prompts.size(); ++i) {
      GenerateOptions o;
      o.max_new_tokens = w.max_new[i];
      o.kv_format = graph::KvFormat{t, t, t == DType::kQ4_0, t == DType::kQ4_0};
      expected.push_back(generate(*runner, w.prompts[i], o).value().generated_ids);
    }
    // A rounding of the f32 cache, not a misreading of it: most first tokens agree with f32's.
    int same_first = 0;
    for (size_t i = 0; i < w.prompts.size(); ++i)
      same_first += !expected[i].empty() && !f32[i].empty() && expected[i][0] == f32[i][0];
    std::cerr << kv << " KV: " << same_first << " of " << w.prompts.size() << " first tokens as with f32\n";
    EXPECT_GE(same_first, static_cast<int>(w.prompts.size()) * (t == DType::kQ4_0 ? 1 : 3) / 4);
    Condition batched{"page16 mbt32 sharing fifo async", 16, 1200, 32, true, 0.0, "fifo", true};
    batched.kv_cache_dtype = kv;
    run_condition(runner, w, expected, batched, false);
    Condition recompute{"tiny pool recompute prefill_first", 16, 24, 64, true, 0.0, "prefill_first", false, 0.0};
    recompute.kv_cache_dtype = kv;
    run_condition(runner, w, expected, recompute, true);
    Condition swap{"tiny pool swap fifo async", 16, 24, 64, false, 1.0 / 16, "fifo", true, 0.0};
    swap.kv_cache_dtype = kv;
    run_condition(runner, w, expected, swap, true);
  }
}

// Matmul precision "medium" rounds what enters each bf16-weight linear to bf16 and
// accumulates bf16 dot products (runtime/cpu/matmul.h). That arithmetic is also the
// same for a row whatever else is in the step, so batching, chunked prefill and
// preemption still reproduce each request run alone — under medium too.
TEST(Determinism, MediumMatmulPrecisionMatchesRunningAlone) {
  cpu::ScopedMatmulPrecision medium(cpu::MatmulPrecision::kMedium);
  auto model = load_fixture("llama-bf16");
  auto runner = make_runner(model);
  const Workload w = make_workload(24, 300, 24, model->vocab_size(), 2468);
  const auto expected = run_alone(*runner, w);
  const Condition batched{"medium page16 mbt32 sharing fifo async", 16, 1200, 32, true, 0.0, "fifo", true};
  run_condition(runner, w, expected, batched, false);
  const Condition big_steps{"medium page64 mbt512 prefill_first sync", 64, 300, 512, false, 0.0, "prefill_first", false};
  run_condition(runner, w, expected, big_steps, false);
  const Condition recompute{"medium tiny pool recompute fifo", 16, 24, 64, true, 0.0, "fifo", true, 0.0};
  run_condition(runner, w, expected, recompute, true);
}

TEST(Determinism, HybridSlidingWindowStackMatchesRunningAlone) {
  // qwen2_sliding: layer 0 full attention, layers 1-2 a 16-token window.
  auto model = load_fixture("qwen2_sliding-f32");
  auto runner = make_runner(model);
  const Workload w = make_workload(16, 80, 16, model->vocab_size(), 99);
  const auto expected = run_alone(*runner, w);
  run_condition(runner, w, expected, {"sliding page8 mbt32", 8, 300, 32, true, 0.0, "fifo", true}, false);
  run_condition(runner, w, expected, {"sliding tiny recompute", 8, 9, 32, true, 0.0, "fifo", false}, true);
  run_condition(runner, w, expected, {"sliding tiny swap", 8, 16, 24, true, 1.0 / 64, "prefill_first", true}, true);
}

TEST(Determinism, AllSlidingLayersMatchRunningAlone) {
  auto model = load_fixture("mistral_sliding-f32");  // every layer slides over 16 tokens
  auto runner = make_runner(model);
  const Workload w = make_workload(10, 70, 20, model->vocab_size(), 5);
  const auto expected = run_alone(*runner, w);
  run_condition(runner, w, expected, {"mistral page4 mbt16", 4, 60, 16, true, 0.0, "fifo", true}, false);
  // 20 pages, while the longest request spans 23 logical pages × 2 layers: it
  // runs only because a request holds a bounded ring of pages whatever its length.
  ASSERT_GT(model->num_layers() * ((*std::max_element(w.prompts.begin(), w.prompts.end(),
                                                       [](const auto& a, const auto& b) { return a.size() < b.size(); }))
                                       .size() + 3) / 4,
            20);
  run_condition(runner, w, expected, {"mistral tiny", 4, 10, 16, true, 0.0, "fifo", false}, false);
}

TEST(Determinism, Gemma2SoftCappedAlternatingWindowsMatchRunningAlone) {
  // gemma2: layers 0 and 2 slide over 16 tokens, 1 and 3 are full; attention
  // logits soft-capped inside the paged kernel, final logits by a softcap op.
  auto model = load_fixture("gemma2-f32");
  auto runner = make_runner(model);
  const Workload w = make_workload(12, 80, 16, model->vocab_size(), 7);
  const auto expected = run_alone(*runner, w);
  run_condition(runner, w, expected, {"gemma2 page8 mbt32", 8, 300, 32, true, 0.0, "fifo", true}, false);
  run_condition(runner, w, expected, {"gemma2 page4 prefill_first", 4, 600, 16, false, 0.0, "prefill_first", false}, false);
}

TEST(Determinism, Gemma3FiveToOneSlidingPatternMatchesRunningAlone) {
  // gemma3: layers 0-4 slide over 16 tokens (local RoPE base), layer 5 is full
  // (global base, linear scaling). Two KV groups: one full, one ring. Prefix
  // caching is asked for (and stays off with sliding layers); preemption by
  // recompute and by swap must not change a token of the full-length run alone.
  auto model = load_fixture("gemma3-f32");
  auto runner = make_runner(model);
  const Workload w = make_workload(12, 90, 16, model->vocab_size(), 48);
  const auto expected = run_alone(*runner, w);
  run_condition(runner, w, expected, {"gemma3 page8 mbt32 sharing", 8, 300, 32, true, 0.0, "fifo", true}, false);
  run_condition(runner, w, expected, {"gemma3 page4 prefill_first", 4, 600, 16, false, 0.0, "prefill_first", false}, false);
  run_condition(runner, w, expected, {"gemma3 tiny recompute", 4, 14, 16, true, 0.0, "prefill_first", true, 0.0}, true);
  run_condition(runner, w, expected, {"gemma3 tiny swap", 4, 14, 16, true, 1.0 / 64, "prefill_first", true, 0.0}, true);
}

// The optimized backend's attention tiles a step per sequence, so decode steps
// (one token per sequence) are row-invariant: requests with one-token prompts
// batched 20 at a time, over small pages and swap preemption, must match.
// Quantized weights (llama.cpp's Q4_K_M recipe, at load): the integer block dot
// products and their f32 accumulation depend on the row alone, so batching,
// chunking and preemption still change no token.
TEST(Determinism, QuantizedModelMatchesRunningAlone) {
  models::LoadOptions lo;
  lo.quantize = quantization_recipe("q4_k_m").value();
  std::shared_ptr<const models::Model> model =
      models::Model::load(std::string(LOOM_SOURCE_DIR) + "/models/loom-kjv-tiny", lo).value();
  int quantized = 0;
  for (const auto& [name, t] : model->parameters()) quantized += dtype_is_quantized(t.dtype()) ? 1 : 0;
  ASSERT_GT(quantized, 0);
  auto runner = make_runner(model);
  const Workload w = make_workload(24, 200, 24, model->vocab_size(), 99);
  const auto expected = run_alone(*runner, w);
  const Condition conditions[] = {
      {"q4_k_m page16 sharing fifo async", 16, 2400, 64, true, 0.0, "fifo", true},
      {"q4_k_m tiny pool recompute prefill_first", 16, 24, 32, false, 0.0, "prefill_first", false, 0.0},
  };
  run_condition(runner, w, expected, conditions[0], false);
  run_condition(runner, w, expected, conditions[1], true);
}

TEST(Determinism, CpuBackendDecodeBatching) {
  auto model = load_fixture("llama-f32");
  auto runner = make_runner(model, "cpu");
  Workload w;
  std::mt19937 rng(3);
  for (int i = 0; i < 20; ++i) {
    w.prompts.push_back(random_tokens(rng, 1, model->vocab_size()));
    w.max_new.push_back(10 + static_cast<int64_t>(rng() % 30));
  }
  const auto expected = run_alone(*runner, w);
  run_condition(runner, w, expected, {"cpu page4", 4, 400, 64, false, 0.0, "fifo", false}, false);
  run_condition(runner, w, expected, {"cpu page4 tiny swap async", 4, 40, 64, false, 1.0 / 64, "fifo", true}, true);
}

}  // namespace
}  // namespace loom::batching
