// The non-matmul kernels of a forward step, at Llama-like sizes: paged attention (decode over
// 512 / 2048 cached tokens, prefill of 512), RMSNorm, RoPE, SwiGLU, softmax over a vocabulary.
//
//   kernels_bench [--benchmark_filter=attention] [--benchmark_repetitions=3]
//
// Threads: the last argument of each benchmark (1 or 2); loom runs on its own ThreadPool.
// Attention decode reports GB/s of K/V read (it is bandwidth-bound); prefill GFLOP/s.
#include <benchmark/benchmark.h>

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "loom/core/thread_pool.h"
#include "loom/runtime/cpu/attention.h"
#include "loom/runtime/cpu/elementwise.h"
#include "loom/runtime/cpu/norm.h"
#include "loom/runtime/cpu/rope.h"
#include "loom/runtime/cpu/softmax.h"

namespace loom::cpu {
namespace {

ThreadPool& pool_of(int threads) {
  static ThreadPool one(1), two(2);
  return threads == 1 ? one : two;
}

std::vector<float> random_vector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

constexpr int64_t kHq = 32, kHkv = 8, kD = 64, kPage = 16;

// One sequence's paged K/V for one layer.
struct Kv {
  std::vector<std::vector<float>> k, v;
  std::vector<const void*> kp, vp;
  int64_t tokens;
  int64_t page;
  explicit Kv(int64_t n, int64_t page_size = kPage) : tokens(n), page(page_size) {
    const int64_t pages = (n + page - 1) / page;
    for (int64_t p = 0; p < pages; ++p) {
      k.push_back(random_vector(static_cast<size_t>(page * kHkv * kD), static_cast<uint32_t>(2 * p)));
      v.push_back(random_vector(static_cast<size_t>(page * kHkv * kD), static_cast<uint32_t>(2 * p + 1)));
    }
    for (auto& x : k) kp.push_back(x.data());
    for (auto& x : v) vp.push_back(x.data());
  }
  KvPages view() const { return {kp.data(), vp.data(), static_cast<int64_t>(kp.size()), page, tokens, {}}; }
};

// Args: context, batch (sequences decoding one token each), threads.
void BM_AttentionDecode(benchmark::State& state) {
  const int64_t context = state.range(0), batch = state.range(1);
  ThreadPool& pool = pool_of(static_cast<int>(state.range(2)));
  std::vector<std::unique_ptr<Kv>> kvs;
  std::vector<int32_t> positions(static_cast<size_t>(batch), static_cast<int32_t>(context - 1));
  std::vector<AttentionSequence> seqs;
  for (int64_t s = 0; s < batch; ++s) {
    kvs.push_back(std::make_unique<Kv>(context));
    seqs.push_back({s, 1, &positions[static_cast<size_t>(s)], kvs.back()->view()});
  }
  const std::vector<float> q = random_vector(static_cast<size_t>(batch * kHq * kD), 7);
  std::vector<float> out(q.size());
  const AttentionParams p{kHq, kHkv, kD, 1.0f / std::sqrt(static_cast<float>(kD)), 0, 0.0f};
  for (auto _ : state) {
    paged_attention(q.data(), kHq * kD, seqs.data(), batch, p, out.data(), kHq * kD, pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * batch * context * kHkv * kD * 2 * 4);
}
BENCHMARK(BM_AttentionDecode)
    ->ArgNames({"ctx", "batch", "threads"})
    ->Args({512, 1, 1})
    ->Args({512, 1, 2})
    ->Args({2048, 1, 1})
    ->Args({2048, 1, 2})
    ->Args({512, 16, 2})
    ->Args({136, 32, 2})  // the batching benchmark's 32-concurrent decode step
    ->Unit(benchmark::kMicrosecond);

// As in a model's decode step: sequences decoding one token each, a different layer's K/V
// each call, enough layers to exceed this machine's L3 (at least 24 and 3× 32 MB), so K/V
// come from memory. 32 sequences at context 136 is the batching benchmark's 32-concurrent
// case, 448 the mean context of its 64-request run; one sequence at context 576 in one page
// of 656 tokens is the middle of `loom bench --prompt-tokens 512 --decode-tokens 128`'s decode
// (its contiguous cache holds a sequence as one page of its capacity, 641, rounded up to 16).
// Pages come from one mapping, as the batching KV pool's do. Args: threads, whether that mapping is advised for transparent huge pages, the cache's
// element type (kv_cache_dtype: 0 float32, 1 bfloat16), context, tokens per page, sequences.
// bytes_per_second counts the bytes of K/V actually read.
void BM_AttentionDecodeFromMemory(benchmark::State& state) {
  const bool bf16 = state.range(2) != 0;
  const size_t elem = bf16 ? 2 : 4;
  const int64_t context = state.range(3), page_tokens = state.range(4);
  const int64_t kBatch = state.range(5);
  ThreadPool& pool = pool_of(static_cast<int>(state.range(0)));
  const int64_t pages = (context + page_tokens - 1) / page_tokens;
  const size_t page_floats = static_cast<size_t>(page_tokens * kHkv * kD);
  const int64_t layer_bytes = kBatch * pages * 2 * static_cast<int64_t>(page_floats * elem);
  const int64_t num_layers = std::max<int64_t>(24 * 136 / context + 1, (int64_t{96} << 20) / layer_bytes + 1);
  const size_t bytes = static_cast<size_t>(num_layers * kBatch * pages * 2) * page_floats * elem;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    state.SkipWithError("mmap failed");
    return;
  }
  if (state.range(1)) madvise(mem, bytes, MADV_HUGEPAGE);
  char* next_page = static_cast<char*>(mem);
  const std::vector<float> fill = random_vector(page_floats, 5);
  std::vector<uint16_t> fill_bf16(page_floats);
  for (size_t i = 0; i < page_floats; ++i) fill_bf16[i] = f32_to_bf16(fill[i]);
  std::vector<std::vector<const void*>> page_ptrs;  // per sequence: K pages then V pages
  std::vector<int32_t> positions(static_cast<size_t>(kBatch), static_cast<int32_t>(context - 1));
  std::vector<std::vector<AttentionSequence>> layers(static_cast<size_t>(num_layers));
  page_ptrs.reserve(static_cast<size_t>(num_layers * kBatch));
  for (auto& seqs : layers) {
    for (int64_t s = 0; s < kBatch; ++s) {
      std::vector<const void*> ptrs;
      for (int64_t i = 0; i < 2 * pages; ++i, next_page += page_floats * elem) {
        std::memcpy(next_page, bf16 ? static_cast<const void*>(fill_bf16.data()) : fill.data(), page_floats * elem);
        ptrs.push_back(next_page);
      }
      page_ptrs.push_back(std::move(ptrs));
      const std::vector<const void*>& p = page_ptrs.back();
      seqs.push_back({s, 1, &positions[static_cast<size_t>(s)],
                      KvPages{p.data(), p.data() + pages, pages, page_tokens, context,
                              bf16 ? graph::KvFormat{DType::kBF16, DType::kBF16} : graph::KvFormat{}}});
    }
  }
  const std::vector<float> q = random_vector(static_cast<size_t>(kBatch * kHq * kD), 7);
  std::vector<float> out(q.size());
  const AttentionParams p{kHq, kHkv, kD, 1.0f / std::sqrt(static_cast<float>(kD)), 0, 0.0f};
  size_t layer = 0;
  for (auto _ : state) {
    paged_attention(q.data(), kHq * kD, layers[layer].data(), kBatch, p, out.data(), kHq * kD, pool);
    layer = (layer + 1) % layers.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * kBatch * context * kHkv * kD * 2 * static_cast<int64_t>(elem));
  munmap(mem, bytes);
}
BENCHMARK(BM_AttentionDecodeFromMemory)
    ->ArgNames({"threads", "huge_pages", "bf16", "ctx", "page", "seqs"})
    ->Args({1, 0, 0, 136, 64, 32})
    ->Args({2, 0, 0, 136, 64, 32})
    ->Args({1, 1, 0, 136, 64, 32})
    ->Args({2, 1, 0, 136, 64, 32})
    ->Args({1, 1, 1, 136, 64, 32})
    ->Args({2, 1, 1, 136, 64, 32})
    ->Args({2, 1, 0, 448, 64, 32})
    ->Args({2, 1, 1, 448, 64, 32})
    ->Args({2, 1, 0, 448, 256, 32})
    ->Args({2, 1, 1, 448, 256, 32})
    ->Args({2, 1, 0, 448, 512, 32})
    ->Args({2, 1, 0, 576, 656, 1})
    ->Args({2, 1, 1, 576, 656, 1})
    ->Args({2, 1, 0, 576, 256, 1})
    ->Unit(benchmark::kMicrosecond);

// Attention at depth per KV cache type (graph/kv_format.h), as `loom bench --depth` runs it: one
// sequence whose K/V of `ctx` positions sit in pages of 256 of one type, then either a decode
// step (one query at position ctx - 1) or a prefill of 512 new tokens after ctx - 512 cached
// ones. 1B-shaped heads (32 q heads, 8 kv heads, head_dim 64). Args: kv type (0 float32,
// 1 bfloat16, 2 float16, 3 q8_0, 4 q4_0 rotated), ctx, prefill (0 decode, 1 pp512), threads.
void BM_AttentionKvType(benchmark::State& state) {
  static const graph::KvFormat kFormats[] = {{DType::kF32, DType::kF32},   {DType::kBF16, DType::kBF16},
                                             {DType::kF16, DType::kF16},   {DType::kQ8_0, DType::kQ8_0},
                                             {DType::kQ4_0, DType::kQ4_0, true, true}};
  const graph::KvFormat f = kFormats[state.range(0)];
  const int64_t ctx = state.range(1), page = 256;
  const bool prefill = state.range(2) != 0;
  ThreadPool& pool = pool_of(static_cast<int>(state.range(3)));
  const int64_t pages = (ctx + page - 1) / page;
  std::vector<std::vector<unsigned char>> k(static_cast<size_t>(pages)), v(static_cast<size_t>(pages));
  std::vector<const void*> kp, vp;
  const std::vector<float> row = random_vector(static_cast<size_t>(kD * 61), 3);
  for (int64_t pg = 0; pg < pages; ++pg) {
    k[static_cast<size_t>(pg)].resize(graph::kv_page_bytes(f.k, page, kHkv, kD));
    v[static_cast<size_t>(pg)].resize(graph::kv_page_bytes(f.v, page, kHkv, kD));
    for (int64_t off = 0; off < page; ++off)
      for (int64_t h = 0; h < kHkv; ++h) {
        const float* x = row.data() + ((pg * page + off) * kHkv + h) % 60 * kD / 2;
        kv_store_row(k[static_cast<size_t>(pg)].data(), f.k, true, off, h, page, kD, x);
        kv_store_row(v[static_cast<size_t>(pg)].data(), f.v, false, off, h, page, kD, x + 1);
      }
    kp.push_back(k[static_cast<size_t>(pg)].data());
    vp.push_back(v[static_cast<size_t>(pg)].data());
  }
  const int64_t n = prefill ? 512 : 1;
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(ctx - n + i);
  const AttentionSequence seq{0, n, positions.data(), KvPages{kp.data(), vp.data(), pages, page, ctx, f}};
  const std::vector<float> q = random_vector(static_cast<size_t>(n * kHq * kD), 7);
  std::vector<float> out(q.size());
  const AttentionParams p{kHq, kHkv, kD, 1.0f / std::sqrt(static_cast<float>(kD)), 0, 0.0f};
  for (auto _ : state) {
    paged_attention(q.data(), kHq * kD, &seq, 1, p, out.data(), kHq * kD, pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);  // tokens/s
}
BENCHMARK(BM_AttentionKvType)
    ->ArgNames({"kv", "ctx", "prefill", "threads"})
    ->ArgsProduct({{0, 1, 2, 3, 4}, {4096, 16384}, {0, 1}, {2}})
    ->Unit(benchmark::kMicrosecond);

void BM_AttentionDecodeRef(benchmark::State& state) {
  const int64_t context = state.range(0);
  Kv kv(context);
  const int32_t pos = static_cast<int32_t>(context - 1);
  const AttentionSequence seq{0, 1, &pos, kv.view()};
  const std::vector<float> q = random_vector(static_cast<size_t>(kHq * kD), 7);
  std::vector<float> out(q.size());
  const AttentionParams p{kHq, kHkv, kD, 1.0f / std::sqrt(static_cast<float>(kD)), 0, 0.0f};
  for (auto _ : state) {
    paged_attention_ref(q.data(), kHq * kD, &seq, 1, p, out.data(), kHq * kD);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * context * kHkv * kD * 2 * 4);
}
BENCHMARK(BM_AttentionDecodeRef)->ArgNames({"ctx"})->Arg(2048)->Unit(benchmark::kMicrosecond);

// Args: prompt length, threads. Causal: ~n²/2 · heads · head_dim · 2 multiply-adds.
void BM_AttentionPrefill(benchmark::State& state) {
  const int64_t n = state.range(0);
  ThreadPool& pool = pool_of(static_cast<int>(state.range(1)));
  Kv kv(n);
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  const AttentionSequence seq{0, n, positions.data(), kv.view()};
  const std::vector<float> q = random_vector(static_cast<size_t>(n * kHq * kD), 7);
  std::vector<float> out(q.size());
  const AttentionParams p{kHq, kHkv, kD, 1.0f / std::sqrt(static_cast<float>(kD)), 0, 0.0f};
  for (auto _ : state) {
    paged_attention(q.data(), kHq * kD, &seq, 1, p, out.data(), kHq * kD, pool);
    benchmark::DoNotOptimize(out.data());
  }
  const double flops = static_cast<double>(n) * (n + 1) / 2 * kHq * kD * 2 * 2;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * static_cast<double>(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionPrefill)
    ->ArgNames({"n", "threads"})
    ->Args({512, 1})
    ->Args({512, 2})
    ->Unit(benchmark::kMillisecond);

// Args: rows, threads. Hidden size 4096.
void BM_RmsNorm(benchmark::State& state) {
  const int64_t rows = state.range(0), n = 4096;
  ThreadPool& pool = pool_of(static_cast<int>(state.range(1)));
  const std::vector<float> x = random_vector(static_cast<size_t>(rows * n), 1), w = random_vector(n, 2);
  std::vector<float> out(x.size());
  for (auto _ : state) {
    rmsnorm(x.data(), rows, n, w.data(), 1e-5f, 0.0f, out.data(), pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * n * 4 * 2);
}
BENCHMARK(BM_RmsNorm)->ArgNames({"rows", "threads"})->Args({1, 1})->Args({1, 2})->Args({512, 1})->Args({512, 2});

void BM_AddRmsNorm(benchmark::State& state) {
  const int64_t rows = state.range(0), n = 4096;
  ThreadPool& pool = pool_of(static_cast<int>(state.range(1)));
  std::vector<float> res = random_vector(static_cast<size_t>(rows * n), 1);
  const std::vector<float> x = random_vector(res.size(), 3), w = random_vector(n, 2);
  std::vector<float> out(x.size());
  for (auto _ : state) {
    add_rmsnorm(res.data(), x.data(), rows, n, w.data(), 1e-5f, 0.0f, res.data(), out.data(), pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * n * 4 * 4);
}
BENCHMARK(BM_AddRmsNorm)->ArgNames({"rows", "threads"})->Args({1, 1})->Args({512, 2});

// Args: tokens, threads. q of 32 heads × 128, full rotary; angles computed in the call.
void BM_Rope(benchmark::State& state) {
  const int64_t rows = state.range(0), heads = 32, d = 128;
  ThreadPool& pool = pool_of(static_cast<int>(state.range(1)));
  std::vector<float> x = random_vector(static_cast<size_t>(rows * heads * d), 1);
  std::vector<int32_t> positions(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(1000 + i);
  std::vector<float> inv_freq;
  float scaling = 1;
  RopeParams params;
  params.theta = 500000;
  throw_if_error(compute_inv_freq(params, d, 0, &inv_freq, &scaling));
  for (auto _ : state) {
    rope_apply(x.data(), rows, heads, d, heads * d, positions.data(), inv_freq.data(), d, scaling, pool);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * heads * d * 4 * 2);
}
BENCHMARK(BM_Rope)->ArgNames({"rows", "threads"})->Args({1, 1})->Args({512, 1})->Args({512, 2});

// The rotation alone, with cos/sin computed once per step and shared by layers.
void BM_RopeCosSinShared(benchmark::State& state) {
  const int64_t rows = state.range(0), heads = 32, d = 128;
  ThreadPool& pool = pool_of(static_cast<int>(state.range(1)));
  std::vector<float> x = random_vector(static_cast<size_t>(rows * heads * d), 1);
  std::vector<int32_t> positions(static_cast<size_t>(rows), 1000);
  std::vector<float> inv_freq;
  float scaling = 1;
  throw_if_error(compute_inv_freq(RopeParams{}, d, 0, &inv_freq, &scaling));
  std::vector<float> cos_sin(static_cast<size_t>(rows * d));
  rope_cos_sin(positions.data(), rows, inv_freq.data(), d, scaling, cos_sin.data());
  for (auto _ : state) {
    rope_apply_cos_sin(x.data(), rows, heads, d, heads * d, cos_sin.data(), d, pool);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * heads * d * 4 * 2);
}
BENCHMARK(BM_RopeCosSinShared)->ArgNames({"rows", "threads"})->Args({1, 1})->Args({512, 2});

// Args: rows, threads. Fused gate_up [rows, 2 × 11008] → [rows, 11008].
void BM_SiluAndMul(benchmark::State& state) {
  const int64_t rows = state.range(0), n = 11008;
  ThreadPool& pool = pool_of(static_cast<int>(state.range(1)));
  const std::vector<float> gate_up = random_vector(static_cast<size_t>(rows * 2 * n), 1);
  std::vector<float> out(static_cast<size_t>(rows * n));
  for (auto _ : state) {
    silu_and_mul(gate_up.data(), 2 * n, gate_up.data() + n, 2 * n, rows, n, out.data(), n, pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * n * 4 * 3);
}
BENCHMARK(BM_SiluAndMul)->ArgNames({"rows", "threads"})->Args({1, 1})->Args({1, 2})->Args({512, 1})->Args({512, 2});

void BM_GeluAndMul(benchmark::State& state) {
  const int64_t rows = state.range(0), n = 11008;
  ThreadPool& pool = pool_of(static_cast<int>(state.range(1)));
  const std::vector<float> gate_up = random_vector(static_cast<size_t>(rows * 2 * n), 1);
  std::vector<float> out(static_cast<size_t>(rows * n));
  for (auto _ : state) {
    gelu_and_mul(gate_up.data(), 2 * n, gate_up.data() + n, 2 * n, rows, n, out.data(), n, pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * n * 4 * 3);
}
BENCHMARK(BM_GeluAndMul)->ArgNames({"rows", "threads"})->Args({1, 1})->Args({512, 2});

// Args: rows, threads. A Qwen2-sized vocabulary.
void BM_Softmax(benchmark::State& state) {
  const int64_t rows = state.range(0), n = 151936;
  ThreadPool& pool = pool_of(static_cast<int>(state.range(1)));
  const std::vector<float> x = random_vector(static_cast<size_t>(rows * n), 1);
  std::vector<float> out(x.size());
  for (auto _ : state) {
    softmax(x.data(), rows, n, out.data(), pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * n * 4 * 2);
}
BENCHMARK(BM_Softmax)->ArgNames({"rows", "threads"})->Args({1, 1})->Args({8, 2});

// Args: elements, threads: where splitting an add across threads starts to pay.
void BM_Add(benchmark::State& state) {
  const int64_t n = state.range(0);
  ThreadPool& pool = pool_of(static_cast<int>(state.range(1)));
  const std::vector<float> a = random_vector(static_cast<size_t>(n), 1), b = random_vector(static_cast<size_t>(n), 2);
  std::vector<float> out(a.size());
  for (auto _ : state) {
    add(a.data(), b.data(), n, out.data(), pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 4 * 3);
}
BENCHMARK(BM_Add)->ArgNames({"n", "threads"})->ArgsProduct({{4096, 32768, 262144, 2097152}, {1, 2}});

}  // namespace
}  // namespace loom::cpu

BENCHMARK_MAIN();
