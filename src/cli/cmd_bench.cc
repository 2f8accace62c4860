// `loom bench`: prefill and decode throughput of one request (batch 1) on random
// prompt ids, printed as a table, then how close each gets to what this machine
// allows: decode against memory read bandwidth (every weight byte is read once
// per token), prefill against the GEMM throughput of oneDNN's matmul. --profile adds
// where each phase's time goes, per op and layer-independent scope.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "baselines/matmul_baselines.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/kv_cache_flags.h"
#include "loom/batching/continuous_batching_config.h"
#include "loom/batching/model_runner.h"
#include "loom/batching/paged_kv_cache.h"
#include "loom/generation/sampling.h"
#include "loom/graph/step_cost.h"
#include "loom/core/cpu_features.h"
#include "loom/runtime/cpu/matmul.h"
#include "loom/runtime/cpu/machine_bounds.h"
#include "loom/runtime/collectives.h"
#include "loom/runtime/kv_cache_contiguous.h"
#include "loom/runtime/op_profile.h"
#include "loom/core/file_pages.h"
#include "loom/runtime/shared_packs.h"

namespace loom::cli {

namespace {
struct BenchFlags {
  ModelOptions model;
  int64_t prompt_tokens = 512;
  int64_t decode_tokens = 128;
  int repeats = 1;
  int64_t depth = 0;  // context positions filled (unmeasured) before the measured prefill and decode
  KvCacheFlags kv;
  bool bounds = true;
  bool profile = false;
  bool warmup = true;
  // Tuning switches for comparing code paths; defaults are what every other command runs.
  std::string quant_layout = "auto";
  std::string quant_gemm = "amx";
  bool keep_mapped_pages = false;
  int64_t kv_context = 0;  // tokens of the KV-per-sequence line; 0: prompt + decode tokens
};

// What one sequence's K/V takes in the serving cache (paged, ContinuousBatchingConfig's
// default pages and step budget: sliding layers keep a ring over their window) against
// a cache keeping every position of every layer, computed from the page layout.
void print_kv_per_sequence(const BenchFlags& f, const models::Model& model) {
  const batching::ContinuousBatchingConfig defaults;
  const int64_t tokens = f.kv_context > 0 ? f.kv_context : f.prompt_tokens + f.decode_tokens;
  const int64_t page = defaults.page_size;
  const int64_t step = 256;  // the step budget when max_batch_tokens is unset
  const graph::KvFormat format = kv_format_from_flags(f.kv);
  const batching::KvFootprint kv =
      batching::kv_footprint(batching::KvCacheLayout::from_model(model), tokens, page, step, format);
  const std::string types = std::string(dtype_name(format.k)) + " / " + std::string(dtype_name(format.v));
  std::printf("\n| KV cache per sequence | tokens | paged (%lld-token pages, sliding layers keep their window) | "
              "full length | paged / full |\n|---|---|---|---|---|\n",
              static_cast<long long>(page));
  std::printf("| %s | %lld | %.1f MiB | %.1f MiB | %.3f |\n", types.c_str(), static_cast<long long>(tokens),
              static_cast<double>(kv.paged_bytes) / (1 << 20), static_cast<double>(kv.full_bytes) / (1 << 20),
              kv.full_bytes > 0 ? static_cast<double>(kv.paged_bytes) / static_cast<double>(kv.full_bytes) : 0.0);
  std::fflush(stdout);
}

// The read bandwidth around one decode run: its weights read with a plain loop just before
// and just after it. These VMs' memory changes speed within seconds (17 to 57 GB/s on the
// Zen 4 of docs/performance.md: other guests' traffic), so a bound measured at another
// moment than the run says little about it.
struct ReadAround {
  double before = 0, after = 0;
  double mean() const { return (before + after) / 2; }
  // The two differ so much that the memory probably changed speed during the run, and
  // the share printed is uncertain.
  bool changed() const { return std::max(before, after) > 1.15 * std::min(before, after); }
};

void print_bounds(const BenchFlags& f, const models::Model& model, ThreadPool& pool, double prefill_tps,
                  double decode_tps, const ReadAround* around) {
  const graph::StepCost cost = graph::step_cost(*model.step_graph());
  const ModelConfig& c = model.config();
  const double T = static_cast<double>(f.prompt_tokens);
  // Causal attention: token i scores depth+i+1 keys and mixes as many values (sliding windows ignored).
  const double attn_flops = 4.0 * static_cast<double>(c.num_attention_heads * c.head_dim) *
                            (static_cast<double>(f.depth) + (T + 1) / 2) *
                            static_cast<double>(c.num_hidden_layers);
  const double prefill_flops =
      2.0 * cost.per_token_matrix_elements + attn_flops + 2.0 * cost.per_sequence_matrix_elements / T;

  std::fprintf(stderr, "measuring %soneDNN matmul throughput...\n", around ? "" : "read bandwidth and ");
  const double gbps = around ? around->mean() : cpu::measure_read_bandwidth_gbps(pool);
  const std::map<DType, int64_t> per = model.checkpoint().parameters_per_dtype();
  DType main_dtype = DType::kF32;
  int64_t most = -1;
  for (const auto& [dt, n] : per) if (n > most) { most = n; main_dtype = dt; }
  const int64_t K = c.hidden_size, N = c.intermediate_size > 0 ? c.intermediate_size : 4 * c.hidden_size;
  Result<double> gemm = cpu::measure_onednn_matmul_gflops(main_dtype, f.prompt_tokens, N, K);

  const double decode_bound = gbps * 1e9 / cost.decode_weight_bytes;
  std::printf("\n| bound | what it is | bound tok/s | loom tok/s | loom / bound |\n|---|---|---|---|---|\n");
  std::string how = std::to_string(pool.num_threads()) + " threads";
  if (around) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "; the weights read just before and after the run: %.1f, %.1f GB/s%s", around->before,
                  around->after, around->changed() ? ", more than 15% apart" : "");
    how += buf;
  }
  std::printf("| decode | %.3f GB of weights per token ÷ %.1f GB/s read (%s) | %.2f | %.2f | %.0f%% |\n",
              cost.decode_weight_bytes / 1e9, gbps, how.c_str(), decode_bound, decode_tps,
              100.0 * decode_tps / decode_bound);
  if (gemm.ok()) {
    const double prefill_bound = gemm.value() * 1e9 / prefill_flops;
    std::printf("| prefill | %.2f GFLOP per token ÷ oneDNN %s matmul %.0f GFLOP/s (%lldx%lldx%lld, OMP threads) | %.1f | %.1f | %.0f%% |\n",
                prefill_flops / 1e9, std::string(dtype_name(main_dtype)).c_str(), gemm.value(),
                static_cast<long long>(f.prompt_tokens), static_cast<long long>(N), static_cast<long long>(K),
                prefill_bound, prefill_tps, 100.0 * prefill_tps / prefill_bound);
  } else {
    std::printf("| prefill | %.2f GFLOP per token; no GEMM bound: %s | - | %.1f | - |\n", prefill_flops / 1e9,
                gemm.status().message().c_str(), prefill_tps);
  }
}

void check_ok(const Status& s) {
  if (!s.ok()) throw Error(s);
}

// Tensor parallelism: what one run's steps spent in collectives.
struct CollectiveTotals {
  runtime::CollectiveStats stats;
  double step_seconds = 0;  // wall time of those steps
  int64_t steps = 0;
};

void print_collectives(const CollectiveTotals& prefill, const CollectiveTotals& decode) {
  std::printf("\n| rank 0 collectives (last run) | calls per step | KiB per step | ms per step | share of step time |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const auto& [name, c] : {std::pair<const char*, const CollectiveTotals&>{"prefill", prefill}, {"decode", decode}}) {
    const double steps = static_cast<double>(std::max<int64_t>(c.steps, 1));
    std::printf("| %s | %.0f | %.1f | %.3f | %.0f%% |\n", name, c.stats.calls / steps, c.stats.bytes / steps / 1024.0,
                c.stats.seconds / steps * 1e3, c.step_seconds > 0 ? 100.0 * c.stats.seconds / c.step_seconds : 0.0);
  }
}

// The KV cache one run of this bench allocates (every rank's is the same size).
double last_kv_bytes(const BenchFlags& f, const batching::ModelRunner& runner) {
  runtime::ContiguousKvCache cache(runner.kv_layout(), 1, f.depth + f.prompt_tokens + f.decode_tokens + 1,
                                   kv_format_from_flags(f.kv));
  return static_cast<double>(cache.bytes());
}

// "q8_0" when K and V share a type, else "K/V"; "+rot" when either is rotated.
std::string kv_format_label(const graph::KvFormat& k) {
  std::string s(graph::kv_dtype_display_name(k.k));
  if (k.v != k.k) s += "/" + std::string(graph::kv_dtype_display_name(k.v));
  if (k.rotate_k || k.rotate_v) s += k.rotate_k && k.rotate_v ? "+rot" : k.rotate_k ? "+rotK" : "+rotV";
  return s;
}

// Positions [0, depth) of the cache filled with random tokens in steps of at most 512, as
// llama-bench -d does before it measures (unmeasured).
void fill_depth(batching::ModelRunner& runner, runtime::ContiguousKvCache& cache, int64_t depth, int64_t vocab) {
  generation::Rng rng(4321);
  std::vector<int32_t> ids(512);
  for (int64_t p = 0; p < depth; p += 512) {
    const int64_t n = std::min<int64_t>(512, depth - p);
    for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(vocab));
    runner.step({{ids.data(), n, p}}, cache).value();
  }
}

// Every rank's weights, KV cache and peak RSS, printed by rank 0.
void print_rank_memory(runtime::Collectives& group, double weight_bytes, double kv_bytes) {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  const float mine[3] = {static_cast<float>(weight_bytes / 1e9), static_cast<float>(kv_bytes / 1e9),
                         static_cast<float>(static_cast<double>(usage.ru_maxrss) * 1024.0 / 1e9)};
  std::vector<float> all(static_cast<size_t>(3 * group.size()));
  check_ok(group.all_gather(mine, 3, all.data()));
  if (group.rank() != 0) return;
  std::printf("\n| rank | weights GB | KV cache GB | peak RSS GB |\n|---|---|---|---|\n");
  for (int r = 0; r < group.size(); ++r)
    std::printf("| %d | %.4f | %.4f | %.4f |\n", r, all[3 * r], all[3 * r + 1], all[3 * r + 2]);
  std::fflush(stdout);
}

void run_bench(const BenchFlags& f) {
  using Clock = std::chrono::steady_clock;
  const std::string dir = resolve_model_dir(f.model).value();
  apply_process_options(f.model);
  cpu::set_auto_quant_layout(cpu::quant_layout_from_name(f.quant_layout).value());
  cpu::set_quantized_gemm_limit(cpu::quant_gemm_from_name(f.quant_gemm).value());
  set_keep_file_pages(f.keep_mapped_pages);
  auto t_load = Clock::now();
  auto model = load_model(dir, f.model, /*tensor_parallel_ok=*/true).value();
  auto runner = batching::ModelRunner::create(model, f.model.backend).value();
  runtime::Collectives* group = runner->group();
  auto weight_bytes_of = [&model] {
    double bytes = 0;
    for (const auto& [name, t] : model->parameters()) bytes += static_cast<double>(t.nbytes());
    return bytes;
  };
  if (follow_steps_unless_leader(*runner)) {
    print_rank_memory(*group, weight_bytes_of(), last_kv_bytes(f, *runner));
    return;
  }
  StepsLeader leader(*runner);
  CollectiveTotals prefill_comm, decode_comm;
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();
  const int64_t vocab = model->vocab_size();
  generation::Rng rng(1234);
  std::vector<int32_t> prompt(static_cast<size_t>(f.prompt_tokens));
  for (auto& id : prompt) id = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(vocab));

  const graph::KvFormat kv_format = kv_format_from_flags(f.kv);
  const runtime::KvLayout kv_layout = runner->kv_layout();
  // K and V bytes one token of context holds, over all layers (the page layout's arithmetic).
  const double kv_bytes_per_token =
      static_cast<double>(graph::kv_position_bytes(kv_format, kv_layout.num_kv_heads, kv_layout.head_dim)) *
      kv_layout.num_layers;
  double best_prefill = 0, best_decode = 0;
  // The read bound is measured around each decode run on the weights it reads (one
  // process's: tensor-parallel runs measure it once, after the runs, as before).
  const bool probe_around = f.bounds && !group;
  std::vector<cpu::ByteRange> streamed;  // taken after the first prefill, which has packed every weight
  ReadAround best_around;
  // The profile is of the last run. Timing a node costs two clock reads and a map update,
  // microseconds against a step's tens of milliseconds.
  runtime::OpProfile& profile = runtime::OpProfile::global();
  std::string prefill_profile, decode_profile;
  // Run -1 warms up as llama-bench does (the prompt, then one decode step), unreported:
  // a model's first steps fault its mapped weights in, from disk if the page cache lost
  // them (on these VMs 0.9 s of a 512-token Q4_K_M prefill).
  for (int rep = f.warmup ? -1 : 0; rep < f.repeats; ++rep) {
    const bool warming = rep < 0;
    const int64_t decode_tokens = warming ? 1 : f.decode_tokens;
    const bool profiled = f.profile && rep + 1 == f.repeats;
    runtime::ContiguousKvCache cache(runner->kv_layout(), 1, f.depth + f.prompt_tokens + f.decode_tokens + 1,
                                     kv_format);
    fill_depth(*runner, cache, f.depth, vocab);
    profile.reset();
    profile.set_enabled(profiled);
    if (group) group->reset_stats();
    auto t0 = Clock::now();
    Tensor logits = runner->step({{prompt.data(), f.prompt_tokens, f.depth}}, cache).value();
    const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (group) {
      prefill_comm = {group->stats(), prefill_s, 1};
      group->reset_stats();
    }
    if (profiled) {
      prefill_profile = profile.table();
      profile.reset();
    }
    int32_t next = 0;
    {
      const float* l = logits.data_as<float>();
      for (int64_t i = 1; i < vocab; ++i) if (l[i] > l[next]) next = static_cast<int32_t>(i);
    }
    ReadAround around;
    if (probe_around && !warming) {
      if (streamed.empty()) streamed = runtime::live_packed_weights();
      around.before = cpu::measure_read_bandwidth_gbps(runner->pool(), streamed);
    }
    auto t1 = Clock::now();
    for (int64_t i = 0; i < decode_tokens; ++i) {
      Tensor out = runner->step({{&next, 1, f.depth + f.prompt_tokens + i}}, cache).value();
      const float* l = out.data_as<float>();
      int32_t best = 0;
      for (int64_t j = 1; j < vocab; ++j) if (l[j] > l[best]) best = static_cast<int32_t>(j);
      next = best;
    }
    const double decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
    if (warming) continue;
    if (probe_around) around.after = cpu::measure_read_bandwidth_gbps(runner->pool(), streamed);
    if (group) decode_comm = {group->stats(), decode_s, f.decode_tokens};
    if (profiled) {
      decode_profile = profile.table();
      profile.set_enabled(false);
      profile.reset();
    }
    best_prefill = std::max(best_prefill, f.prompt_tokens / prefill_s);
    if (f.decode_tokens / decode_s > best_decode) {
      best_decode = f.decode_tokens / decode_s;
      best_around = around;
    }
  }
  // The weights as they run (quantized at load, or as the file stores them).
  std::map<DType, int64_t> per;
  double weight_bytes = 0;
  for (const auto& [name, t] : model->parameters()) {
    per[t.dtype()] += t.numel();
    weight_bytes += static_cast<double>(t.nbytes());
  }
  std::string dtypes;
  for (const auto& [dt, n] : per) dtypes += (dtypes.empty() ? "" : "+") + std::string(dtype_name(dt));
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  const double peak_rss_gb = static_cast<double>(usage.ru_maxrss) * 1024.0 / 1e9;  // ru_maxrss is in KB on Linux
  const std::string at_depth = f.depth > 0 ? " @ d" + std::to_string(f.depth) : "";
  std::printf(
      "| model | dtype | params | threads | isa | backend | matmul | kv cache | KV B/token | prefill tok/s (%lld%s) | "
      "decode tok/s (%lld%s) | load s | weights GB | peak RSS GB |\n",
      static_cast<long long>(f.prompt_tokens), at_depth.c_str(), static_cast<long long>(f.decode_tokens),
      at_depth.c_str());
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  // The matmul column says whether bf16 weights ran on bf16 dot products (medium or auto on a CPU with fast ones).
  const std::string matmul = std::string(cpu::matmul_precision_name(cpu::matmul_precision())) +
                             (cpu::bf16_dot_products_active() ? " (bf16 dot)" : "");
  std::printf("| %s | %s | %.3gB | %d | %s | %s | %s | %s | %.0f | %.1f | %.2f | %.2f | %.3f | %.3f |\n",
              model->module().class_name().c_str(), dtypes.c_str(), model->checkpoint().parameter_count() / 1e9,
              runner->pool().num_threads(), cpu::isa_name().c_str(), runner->backend_name().c_str(), matmul.c_str(),
              kv_format_label(kv_format).c_str(), kv_bytes_per_token, best_prefill, best_decode, load_s,
              weight_bytes / 1e9, peak_rss_gb);
  std::fflush(stdout);
  print_kv_per_sequence(f, *model);
  if (group) {
    print_collectives(prefill_comm, decode_comm);
    check_ok(runner->end_steps());
    print_rank_memory(*group, weight_bytes, last_kv_bytes(f, *runner));
  }
  if (f.bounds) {
    const bool measured_around = probe_around && best_around.before > 0 && best_around.after > 0;
    print_bounds(f, *model, runner->pool(), best_prefill, best_decode, measured_around ? &best_around : nullptr);
  }
  if (f.profile) {
    std::printf("\nPrefill of %lld tokens, time per op:\n%s", static_cast<long long>(f.prompt_tokens),
                prefill_profile.c_str());
    std::printf("\nDecode of %lld tokens, time per op:\n%s", static_cast<long long>(f.decode_tokens),
                decode_profile.c_str());
  }
}
}  // namespace

void add_bench_command(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  auto* cmd = app.add_subcommand("bench", "Measure prefill and decode tokens/s at batch 1");
  add_model_options(cmd, &f->model);
  cmd->add_option("--prompt-tokens", f->prompt_tokens, "Prompt length for prefill")->check(CLI::PositiveNumber);
  cmd->add_option("--decode-tokens", f->decode_tokens, "Tokens decoded after the prompt")->check(CLI::PositiveNumber);
  cmd->add_option("--repeats", f->repeats, "Runs; the best is reported")->check(CLI::PositiveNumber);
  cmd->add_option("--depth,-d", f->depth,
                  "Context tokens filled (unmeasured) before the measured prefill and decode, as llama-bench -d")
      ->check(CLI::NonNegativeNumber);
  add_kv_cache_options(cmd, &f->kv);
  cmd->add_flag("!--no-bounds", f->bounds,
                "Skip measuring this machine's bounds (the weights' read bandwidth just before and after each decode run, oneDNN matmul) and loom's share of them");
  cmd->add_flag("!--no-warmup", f->warmup,
                "Skip the unreported warm-up run (the prompt and one decode step) before the measured ones");
  cmd->add_option("--quant-layout", f->quant_layout,
                  "How Q4_0, Q4_K, Q5_K, Q6_K and Q8_0 weights are kept: auto (default: interleaved in groups of 8 "
                  "rows where this CPU's decode kernels read them faster), rows (as stored) or interleaved")
      ->check(CLI::IsMember({"auto", "rows", "interleaved"}));
  cmd->add_option("--quant-gemm", f->quant_gemm,
                  "The best path quantized batches (prefill) may take: amx (default: every path, each where the CPU "
                  "has it), vnni, avx2 or rows (the row kernels)")
      ->check(CLI::IsMember({"amx", "vnni", "avx2", "rows"}));
  cmd->add_flag("--keep-mapped-pages", f->keep_mapped_pages,
                "Keep the file pages under weights that were copied at load (interleaved, packed) instead of handing "
                "them back, to measure what handing them back saves");
  cmd->add_option("--kv-context", f->kv_context,
                  "Context length of the printed KV-cache-per-sequence figure (paged, sliding layers holding their "
                  "window, against a full-length cache); default: prompt + decode tokens")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--profile", f->profile,
                "Also print where prefill and decode time goes, per op and scope (times the last run's every node)");
  cmd->callback([f] { run_bench(*f); });
}

}  // namespace loom::cli
