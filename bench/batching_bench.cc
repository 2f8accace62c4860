// Continuous batching against the two ways of serving many requests without it,
// in generated tokens per second over the same workload (greedy, no EOS):
//   one_at_a_time   batching::generate per request, one after the other;
//   static          all requests as one padded batch: prompts padded to the
//                   longest, one prefill, then decode steps until all are done;
//   continuous      generate_batch (paged KV cache, chunked prefill, fifo).
// Plus time to first token of a request behind a long prompt, with and without
// that prompt's prefix already in the prefix cache.
//
//   LOOM_BENCH_MODEL=/work/bench-models/llama-1b-bf16 batching_bench
//
// Workload knobs (the defaults are the workload docs/batching.md describes): LOOM_BENCH_REQUESTS=64,
// LOOM_BENCH_PROMPT_MIN=128, LOOM_BENCH_PROMPT_MAX=512, LOOM_BENCH_NEW_TOKENS=128,
// LOOM_BENCH_PREFIX=1000 (TTFT), LOOM_BENCH_MAX_BATCH_TOKENS=512, LOOM_BENCH_PAGE_SIZE=64
// LOOM_BENCH_ASYNC=0 (continuous: use_async_batching) and LOOM_BENCH_SCHEDULER=fifo
// (continuous: scheduler_type).
// LOOM_BENCH_NEW_TOKENS_MIN=m draws each request's length uniformly from
// [m, LOOM_BENCH_NEW_TOKENS] instead (as if EOS came at different times): a static
// batch then decodes until its longest request is done.
// Each case runs once (a run is long); compare the gen_tok_per_s counters, and the
// machine-speed probes each case takes before and after (probe_GFLOPs_*).
// LOOM_BENCH_ONE_AT_A_TIME_EVERY=k runs one-at-a-time on every k-th request
// only (its rate per token is what matters; all 64 take ~15 min on 2 cores).
// LOOM_BENCH_PROFILE=1 prints, after each case, its time per op and scope (stderr).
// LOOM_BENCH_GROUP_PREFETCH=0 turns off the batched-decode weight prefetch, for A/B runs.
// LOOM_BENCH_KV_DTYPE=bfloat16 keeps every case's KV cache in bf16 (kv_cache_dtype; the
// contiguous caches of one-at-a-time, static and decode-at-batch too), float32 by default.
// LOOM_BENCH_MATMUL_PRECISION=medium runs every case's bf16 linears on bf16 dot products
// where the CPU has them (matmul.h, set_matmul_precision); the process's default otherwise.
// Every knob is listed in bench/README.md.
// BM_DecodeAtBatch: LOOM_BENCH_CONCURRENT (32), LOOM_BENCH_DECODE_STEPS (16);
// it also reports this machine's bound for that step, computed as the issue
// does: weight bytes ÷ measured read bandwidth + the step's multiply-adds ÷
// oneDNN's measured matmul rate at M = LOOM_BENCH_CONCURRENT.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "baselines/matmul_baselines.h"
#include "loom/batching/generate.h"
#include "loom/batching/generate_batch.h"
#include "loom/batching/model_runner.h"
#include "loom/graph/step_cost.h"
#include "loom/models/model.h"
#include "loom/runtime/cpu/machine_bounds.h"
#include "loom/runtime/cpu/matmul.h"
#include "loom/runtime/kv_cache_contiguous.h"
#include "loom/runtime/op_profile.h"
#include "runtime/cpu/matmul_kernels.h"

namespace loom::batching {
namespace {

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : fallback;
}

// LOOM_BENCH_KV_DTYPE as kv_cache_dtype's name ("float32" unless set); a bad name ends the run.
std::string kv_dtype_name() {
  const char* v = std::getenv("LOOM_BENCH_KV_DTYPE");
  const std::string name = v && *v ? v : "float32";
  if (const Result<DType> r = kv_cache_dtype_from_name(name); !r.ok()) {
    std::fprintf(stderr, "LOOM_BENCH_KV_DTYPE %s\n", r.status().message().c_str());
    std::exit(2);
  }
  return name;
}
DType kv_dtype() { return kv_cache_dtype_from_name(kv_dtype_name()).value(); }

struct Setup {
  std::shared_ptr<const models::Model> model;
  std::shared_ptr<ModelRunner> runner;
  std::vector<std::vector<int32_t>> prompts;
  int64_t new_tokens = 0;             // the longest request's
  std::vector<int64_t> lengths;       // tokens each request generates
};

Setup& setup() {
  static Setup s = [] {
    Setup x;
    // A/B switch for the batched-decode weight prefetch (matmul.cc stream_panels).
    if (env_int("LOOM_BENCH_GROUP_PREFETCH", 1) == 0) cpu::detail::set_stream_group_prefetch(false);
    if (const char* p = std::getenv("LOOM_BENCH_MATMUL_PRECISION"); p && *p) {
      const Result<cpu::MatmulPrecision> precision = cpu::matmul_precision_from_name(p);
      if (!precision.ok()) {
        std::fprintf(stderr, "LOOM_BENCH_MATMUL_PRECISION: %s\n", precision.status().message().c_str());
        std::exit(2);
      }
      cpu::set_matmul_precision(precision.value());
    }
    std::fprintf(stderr, "matmul precision %s%s\n", cpu::matmul_precision_name(cpu::matmul_precision()),
                 cpu::bf16_dot_products_active() ? " (bf16 dot products)" : "");
    const char* dir = std::getenv("LOOM_BENCH_MODEL");
    x.model = models::Model::load(dir ? dir : "/work/bench-models/llama-1b-bf16").value();
    x.runner = std::shared_ptr<ModelRunner>(ModelRunner::create(x.model, "cpu").value().release());
    const int64_t n = env_int("LOOM_BENCH_REQUESTS", 64);
    const int64_t lo = env_int("LOOM_BENCH_PROMPT_MIN", 128), hi = env_int("LOOM_BENCH_PROMPT_MAX", 512);
    x.new_tokens = env_int("LOOM_BENCH_NEW_TOKENS", 128);
    std::mt19937 rng(1);
    std::uniform_int_distribution<int32_t> tok(3, static_cast<int32_t>(x.model->vocab_size()) - 1);
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int32_t> p(static_cast<size_t>(lo + static_cast<int64_t>(rng() % static_cast<uint32_t>(hi - lo + 1))));
      for (auto& t : p) t = tok(rng);
      x.prompts.push_back(std::move(p));
    }
    const int64_t shortest = std::min(env_int("LOOM_BENCH_NEW_TOKENS_MIN", x.new_tokens), x.new_tokens);
    std::mt19937 len_rng(2);
    for (int64_t i = 0; i < n; ++i)
      x.lengths.push_back(shortest + static_cast<int64_t>(len_rng() % static_cast<uint32_t>(x.new_tokens - shortest + 1)));
    x.new_tokens = *std::max_element(x.lengths.begin(), x.lengths.end());
    return x;
  }();
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// This machine's matrix-multiply speed right now: loom's bf16 linear, 2048→8192 at 256
// rows (the shape and kernels of a prefill step), best of 10. Each case measures it just
// before and after it runs (probe_GFLOPs_before/after): on a shared VM the speed drifts
// by 10-30% over minutes, and a ratio between two cases means little when their probes
// differ that much.
double probe_gflops(ThreadPool& pool) {
  constexpr int64_t M = 256, K = 2048, N = 8192;
  static const cpu::PackedLinear w = [] {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(N * K));
    for (float& x : v) x = u(rng);
    return cpu::PackedLinear::pack(Tensor::from_f32(v, {N, K}).to(DType::kBF16), nullptr).value();
  }();
  std::vector<float> x(static_cast<size_t>(M * K), 0.5f), y(static_cast<size_t>(M * N));
  double best = 1e30;
  for (int r = 0; r < 10; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu::linear(x.data(), M, K, w, y.data(), N, pool);
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * M * N * K / best * 1e-9;
}
double g_probe_before = 0.0;

// Starts the per-op profile of a case when LOOM_BENCH_PROFILE is set, after probing the
// machine's speed.
const char* g_profiled_case = "";
void start_profile(const char* name) {
  g_probe_before = probe_gflops(setup().runner->pool());
  g_profiled_case = name;
  runtime::OpProfile& p = runtime::OpProfile::global();
  p.reset();
  p.set_enabled(env_int("LOOM_BENCH_PROFILE", 0) != 0);
}

void report(benchmark::State& state, int64_t generated, double seconds) {
  runtime::OpProfile& p = runtime::OpProfile::global();
  if (p.enabled()) {
    std::fprintf(stderr, "\n%s, time per op:\n%s\n", g_profiled_case, p.table(30).c_str());
    p.set_enabled(false);
    p.reset();
  }
  state.SetIterationTime(seconds);
  state.counters["probe_GFLOPs_before"] = g_probe_before;
  state.counters["probe_GFLOPs_after"] = probe_gflops(setup().runner->pool());
  state.counters["gen_tok_per_s"] = static_cast<double>(generated) / seconds;
  state.counters["generated"] = static_cast<double>(generated);
}

void BM_OneAtATime(benchmark::State& state) {
  Setup& s = setup();
  const int64_t every = std::max<int64_t>(1, env_int("LOOM_BENCH_ONE_AT_A_TIME_EVERY", 1));
  for (auto _ : state) {
    start_profile("one at a time");
    const auto t0 = std::chrono::steady_clock::now();
    int64_t generated = 0;
    for (size_t i = 0; i < s.prompts.size(); i += static_cast<size_t>(every)) {
      const auto& p = s.prompts[i];
      GenerateOptions o;
      o.max_new_tokens = s.lengths[i];
      o.logprobs = false;  // as generate_batch without return_logprobs
      o.kv_cache_dtype = kv_dtype();
      generated += static_cast<int64_t>(generate(*s.runner, p, o).value().generated_ids.size());
    }
    report(state, generated, seconds_since(t0));
    state.counters["requests_run"] = static_cast<double>((s.prompts.size() + static_cast<size_t>(every) - 1) /
                                                         static_cast<size_t>(every));
  }
}

int32_t argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

void BM_Static(benchmark::State& state) {
  Setup& s = setup();
  const int64_t b = static_cast<int64_t>(s.prompts.size());
  size_t longest = 0;
  for (const auto& p : s.prompts) longest = std::max(longest, p.size());
  for (auto _ : state) {
    start_profile("static");
    const auto t0 = std::chrono::steady_clock::now();
    runtime::ContiguousKvCache cache(s.runner->kv_layout(), static_cast<int>(b), static_cast<int64_t>(longest) + s.new_tokens,
                                     kv_dtype());
    // Left-padded to the longest prompt (the pad positions are computed too, as in a padded batch).
    std::vector<std::vector<int32_t>> padded;
    std::vector<SequenceChunk> chunks;
    for (const auto& p : s.prompts) {
      std::vector<int32_t> q(longest - p.size(), p.front());
      q.insert(q.end(), p.begin(), p.end());
      padded.push_back(std::move(q));
    }
    for (const auto& q : padded) chunks.push_back({q.data(), static_cast<int64_t>(q.size()), 0});
    Tensor logits = s.runner->step(chunks, cache).value();
    std::vector<int32_t> next(static_cast<size_t>(b));
    int64_t generated = 0;
    for (int64_t step = 0; step < s.new_tokens; ++step) {
      const float* rows = logits.data_as<float>();
      for (int64_t i = 0; i < b; ++i) {
        next[static_cast<size_t>(i)] = argmax(rows + i * s.model->vocab_size(), s.model->vocab_size());
        if (step < s.lengths[static_cast<size_t>(i)]) ++generated;  // later tokens are the batch waiting
      }
      if (step + 1 == s.new_tokens) break;
      chunks.clear();
      for (int64_t i = 0; i < b; ++i)
        chunks.push_back({&next[static_cast<size_t>(i)], 1, static_cast<int64_t>(longest) + step});
      logits = s.runner->step(chunks, cache).value();
    }
    report(state, generated, seconds_since(t0));
    // Weight multiply-adds of this run over those continuous batching needs for the same
    // requests (attention left out): the speed-up it can get from skipping padding and
    // waiting alone, at equal kernel speed.
    const graph::StepCost cost = graph::step_cost(*s.model->step_graph());
    const double tok = cost.per_token_matrix_elements, seq = cost.per_sequence_matrix_elements;
    double needed = 0;
    for (size_t i = 0; i < s.prompts.size(); ++i)
      needed += static_cast<double>(s.prompts[i].size()) * tok + seq +
                static_cast<double>(s.lengths[i] - 1) * (tok + seq);
    const double done = static_cast<double>(b) * (static_cast<double>(longest) * tok + seq) +
                        static_cast<double>(s.new_tokens - 1) * static_cast<double>(b) * (tok + seq);
    state.counters["work_vs_continuous"] = done / needed;
    // The same for attention: query-key pairs (causal prefill, then each decode token against
    // its whole context), which padding inflates more than the weight work.
    auto pairs = [](double prompt, double generated) {  // prompt + (generated - 1) decode steps
      const double decode = generated - 1;
      return prompt * (prompt + 1) / 2 + decode * prompt + decode * (decode + 1) / 2;
    };
    double pairs_needed = 0;
    for (size_t i = 0; i < s.prompts.size(); ++i)
      pairs_needed += pairs(static_cast<double>(s.prompts[i].size()), static_cast<double>(s.lengths[i]));
    const double pairs_done = static_cast<double>(b) * pairs(static_cast<double>(longest), static_cast<double>(s.new_tokens));
    state.counters["attention_work_vs_continuous"] = pairs_done / pairs_needed;
  }
}

void BM_Continuous(benchmark::State& state) {
  Setup& s = setup();
  std::vector<BatchInput> inputs;
  for (const auto& p : s.prompts) {
    BatchInput in;
    in.input_ids = p;
    in.options.max_new_tokens = s.lengths[inputs.size()];
    inputs.push_back(std::move(in));
  }
  ContinuousBatchingConfig cfg;
  const int64_t page = env_int("LOOM_BENCH_PAGE_SIZE", 64);
  cfg.page_size = page;
  size_t longest = 0;
  for (const auto& p : s.prompts) longest = std::max(longest, p.size());
  cfg.num_blocks = static_cast<int64_t>(s.prompts.size()) * ((static_cast<int64_t>(longest) + s.new_tokens) / page + 2);
  cfg.max_batch_tokens = env_int("LOOM_BENCH_MAX_BATCH_TOKENS", 512);
  cfg.allow_block_sharing = false;
  cfg.kv_cache_dtype = kv_dtype_name();
  cfg.use_async_batching = env_int("LOOM_BENCH_ASYNC", 0) != 0;
  if (const char* v = std::getenv("LOOM_BENCH_SCHEDULER"); v && *v) cfg.scheduler_type = v;
  GenerationConfig gc;
  GenerateBatchOptions opts;
  opts.warmup = false;
  for (auto _ : state) {
    start_profile("continuous");
    const auto t0 = std::chrono::steady_clock::now();
    const BatchResult r = generate_batch(s.runner, inputs, gc, cfg, opts).value();
    int64_t generated = 0;
    for (const auto& o : r.outputs) generated += static_cast<int64_t>(o.generated_tokens.size());
    report(state, generated, seconds_since(t0));
    state.counters["steps"] = static_cast<double>(r.stats.steps);
  }
}

// Decode rate at a fixed batch: LOOM_BENCH_CONCURRENT sequences (default 32)
// with LOOM_BENCH_PROMPT_MIN-token prompts already prefilled, then
// LOOM_BENCH_DECODE_STEPS packed decode steps of one token each — the rate the
// issue's "32 concurrent requests" aim is about, without the prefill phase.
void BM_DecodeAtBatch(benchmark::State& state) {
  Setup& s = setup();
  const int64_t b = env_int("LOOM_BENCH_CONCURRENT", 32);
  const int64_t prompt = env_int("LOOM_BENCH_PROMPT_MIN", 128);
  const int64_t steps = env_int("LOOM_BENCH_DECODE_STEPS", 16);
  std::mt19937 rng(4);
  std::uniform_int_distribution<int32_t> tok(3, static_cast<int32_t>(s.model->vocab_size()) - 1);
  std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(b), std::vector<int32_t>(static_cast<size_t>(prompt)));
  for (auto& q : seqs)
    for (auto& t : q) t = tok(rng);
  for (auto _ : state) {
    runtime::ContiguousKvCache cache(s.runner->kv_layout(), static_cast<int>(b), prompt + steps + 1, kv_dtype());
    std::vector<SequenceChunk> chunks;
    for (int64_t i = 0; i < b; ++i) chunks.push_back({seqs[static_cast<size_t>(i)].data(), prompt, 0});
    Tensor logits = s.runner->step(chunks, cache).value();
    std::vector<int32_t> next(static_cast<size_t>(b));
    start_profile("decode at batch");
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t step = 0; step < steps; ++step) {
      const float* rows = logits.data_as<float>();
      for (int64_t i = 0; i < b; ++i) next[static_cast<size_t>(i)] = argmax(rows + i * s.model->vocab_size(), s.model->vocab_size());
      chunks.clear();
      for (int64_t i = 0; i < b; ++i) chunks.push_back({&next[static_cast<size_t>(i)], 1, prompt + step});
      logits = s.runner->step(chunks, cache).value();
    }
    const double seconds = seconds_since(t0);
    report(state, b * steps, seconds);
    state.counters["batch"] = static_cast<double>(b);
    // This machine's bound for the step, the arithmetic with measured rates.
    const graph::StepCost cost = graph::step_cost(*s.model->step_graph());
    const double gbps = cpu::measure_read_bandwidth_gbps(s.runner->pool());
    DType main_dtype = DType::kF32;
    int64_t most = -1;
    for (const auto& [dt, n] : s.model->checkpoint().parameters_per_dtype())
      if (n > most) most = n, main_dtype = dt;
    const ModelConfig& c = s.model->config();
    Result<double> gflops = cpu::measure_onednn_matmul_gflops(main_dtype, b, c.intermediate_size, c.hidden_size);
    state.counters["read_GBps"] = gbps;
    if (gflops.ok()) {
      const double flops = 2.0 * static_cast<double>(b) * (cost.per_token_matrix_elements + cost.per_sequence_matrix_elements);
      const double bound_s = cost.decode_weight_bytes / (gbps * 1e9) + flops / (gflops.value() * 1e9);
      state.counters["onednn_GFLOPs"] = gflops.value();
      state.counters["loom_GFLOPs"] = flops * static_cast<double>(steps) / seconds / 1e9;
      state.counters["bound_tok_per_s"] = static_cast<double>(b) / bound_s;
      state.counters["share_of_bound"] = static_cast<double>(b * steps) / seconds / (static_cast<double>(b) / bound_s);
    }
  }
}

// Time to first token of one request whose prompt is a long prefix plus a
// short question, with the prefix cached (state.range(0) = 1) or not.
void BM_TimeToFirstToken(benchmark::State& state) {
  Setup& s = setup();
  const bool cached = state.range(0) == 1;
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> tok(3, static_cast<int32_t>(s.model->vocab_size()) - 1);
  std::vector<int32_t> prefix(static_cast<size_t>(env_int("LOOM_BENCH_PREFIX", 1000)));
  for (auto& t : prefix) t = tok(rng);
  ContinuousBatchingConfig cfg;
  cfg.page_size = 16;
  cfg.num_blocks = static_cast<int64_t>(prefix.size()) / 16 * 4 + 64;
  cfg.max_batch_tokens = env_int("LOOM_BENCH_MAX_BATCH_TOKENS", 512);
  cfg.allow_block_sharing = cached;
  cfg.kv_cache_dtype = kv_dtype_name();
  auto m = ContinuousBatchingManager::create(s.runner, GenerationConfig(), cfg).value();
  (void)m->start();
  RequestOptions o;
  o.max_new_tokens = 1;
  if (cached) {  // an earlier request with the same prefix filled the cache
    std::vector<int32_t> warm = prefix;
    warm.push_back(tok(rng));
    (void)m->add_request(warm, o);
    (void)m->get_result(std::nullopt, 600.0);
  }
  int round = 0;
  for (auto _ : state) {
    std::vector<int32_t> p = prefix;
    for (int i = 0; i < 16; ++i) p.push_back(tok(rng));
    o.request_id = "ttft" + std::to_string(round++);
    const auto t0 = std::chrono::steady_clock::now();
    (void)m->add_request(p, o);
    std::optional<GenerationOutput> out = m->get_result(o.request_id, 600.0);
    state.SetIterationTime(seconds_since(t0));
    if (!out || out->status != RequestStatus::kFinished) state.SkipWithError("request failed");
  }
  state.counters["prefix_hit_tokens"] = static_cast<double>(m->stats().prefix_hit_tokens);
  m->destroy();
}

BENCHMARK(BM_Continuous)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);
BENCHMARK(BM_Static)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);
BENCHMARK(BM_OneAtATime)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);
BENCHMARK(BM_DecodeAtBatch)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);
BENCHMARK(BM_TimeToFirstToken)->Arg(0)->Arg(1)->Iterations(3)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace loom::batching

BENCHMARK_MAIN();
