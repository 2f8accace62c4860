// Linear layer y = x·Wᵀ + b: loom's kernels on each code path against oneDNN and
// OpenBLAS, for decode (M = 1, reported as GB/s of weights read) and prefill
// (M = 512, GFLOP/s), plus the row sweep behind linear()'s decode/blocked switch,
// quantized weights (quant/, GB/s of quantized weight bytes read from memory) and a
// plain read of memory on the same threads to compare them with (memory/read).
//
//   matmul_bench --benchmark_filter='quant/|memory/read'
//
//   matmul_bench [--benchmark_filter=gemv/bf16] [--benchmark_repetitions=3]
//
// Threads: loom uses ThreadPool::global() (LOOM_NUM_THREADS, default all cores);
// oneDNN its OpenMP team (OMP_NUM_THREADS); OpenBLAS is set to the same count.
// Debian's OpenBLAS may not recognise the CPU (the program says so): then run with
// OPENBLAS_CORETYPE=COOPERLAKE for a fair comparison.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "loom/core/thread_pool.h"
#include "loom/core/cpu_features.h"
#include "loom/runtime/cpu/matmul.h"
#include "baselines/matmul_baselines.h"
#include "runtime/cpu/matmul_kernels.h"
#include "runtime/cpu/qlayout.h"
#include "runtime/cpu/qlinear.h"

#if defined(LOOM_MATMUL_X86)
#include <immintrin.h>
#endif

namespace loom::cpu {
namespace {

struct LinearShape {
  int64_t K, N;
};
// Llama-3.2-1B / 3B-like projections: q/o, up/gate, down, lm_head.
const LinearShape kShapes[] = {{2048, 2048}, {2048, 8192}, {8192, 2048}, {2048, 128256}};

enum class Impl { kLoom, kOnednn, kOpenblas };

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// One prepared layer at a time (the lm_head in f32 is 1 GB per copy), reused
// across the repeated calls Google Benchmark makes for the same case.
struct Prepared {
  std::string key;
  int64_t K = 0, N = 0;
  DType dt = DType::kF32;
  PackedLinear loom;
  std::unique_ptr<baseline::OnednnLinear> onednn;
  std::unique_ptr<baseline::OpenblasLinear> openblas;
};

Prepared& prepare(const LinearShape& s, DType dt, Impl impl) {
  static Prepared cur;
  const std::string key = std::to_string(s.K) + "x" + std::to_string(s.N) + std::string(dtype_name(dt)) +
                          std::to_string(static_cast<int>(impl));
  if (cur.key == key) return cur;
  cur = Prepared();
  const Tensor weight = Tensor::from_f32(random_floats(static_cast<size_t>(s.N * s.K), 1), {s.N, s.K}).to(dt);
  const Tensor bias = Tensor::from_f32(random_floats(static_cast<size_t>(s.N), 2), {s.N});
  cur.K = s.K;
  cur.N = s.N;
  cur.dt = dt;
  switch (impl) {
    case Impl::kLoom: cur.loom = PackedLinear::pack(weight, &bias).value(); break;
    case Impl::kOnednn: cur.onednn = std::move(baseline::OnednnLinear::create(weight, &bias).value()); break;
    case Impl::kOpenblas: cur.openblas = std::move(baseline::OpenblasLinear::create(weight, &bias).value()); break;
  }
  cur.key = key;
  return cur;
}

void run_case(benchmark::State& state, const LinearShape& s, DType dt, Impl impl, int64_t M, Isa isa) {
  std::unique_ptr<ScopedIsa> force;
  if (impl == Impl::kLoom) force = std::make_unique<ScopedIsa>(isa);
  Prepared& p = prepare(s, dt, impl);
  const std::vector<float> x = random_floats(static_cast<size_t>(M * s.K), 3);
  std::vector<float> y(static_cast<size_t>(M * s.N));
  ThreadPool& pool = ThreadPool::global();
  for (auto _ : state) {
    switch (impl) {
      case Impl::kLoom: linear(x.data(), M, s.K, p.loom, y.data(), s.N, pool); break;
      case Impl::kOnednn: p.onednn->run(x.data(), M, y.data()); break;
      case Impl::kOpenblas: p.openblas->run(x.data(), M, y.data()); break;
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  // Weight bytes as the caller stores them (OpenBLAS actually reads f32).
  const double weight_bytes = static_cast<double>(s.N) * s.K * dtype_size(dt);
  const double flops = 2.0 * M * s.N * s.K;
  state.counters["GB/s"] = benchmark::Counter(weight_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Times linear() on each copy in turn, so every call reads its weights from memory.
void time_round_robin(benchmark::State& state, const std::vector<PackedLinear>& copies, const LinearShape& s, int64_t M) {
  const std::vector<float> x = random_floats(static_cast<size_t>(M * s.K), 3);
  std::vector<float> y(static_cast<size_t>(M * s.N));
  ThreadPool& pool = ThreadPool::global();
  size_t next = 0;
  for (auto _ : state) {
    linear(x.data(), M, s.K, copies[next], y.data(), s.N, pool);
    next = (next + 1) % copies.size();
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
}

// As in a model run, where a decode step reads every layer's weights once: a
// different copy of the layer each call, 640 MB in all (more than this machine's
// 260 MB L3), so the weights come from memory rather than from L3.
void run_from_memory(benchmark::State& state, const LinearShape& s, int64_t M, bool group_prefetch) {
  static std::string key;
  static std::vector<PackedLinear> copies;
  const std::string want = std::to_string(s.K) + "x" + std::to_string(s.N);
  if (key != want) {
    copies.clear();
    const Tensor weight = Tensor::from_f32(random_floats(static_cast<size_t>(s.N * s.K), 1), {s.N, s.K}).to(DType::kBF16);
    const int64_t n = std::max<int64_t>(2, (int64_t{640} << 20) / (s.N * s.K * 2));
    for (int64_t i = 0; i < n; ++i) copies.push_back(PackedLinear::pack(weight, nullptr).value());
    key = want;
  }
  detail::set_stream_group_prefetch(group_prefetch);
  time_round_robin(state, copies, s, M);
  detail::set_stream_group_prefetch(true);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(s.N) * s.K * 2 * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * s.N * s.K * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Quantized weights from memory, as run_from_memory: copies of one quantized
// layer, 640 MB in all, a different one each call (each its own storage: a
// quantized PackedLinear is a view of its tensor).
// gemm: the best batched path allowed (the row kernels, VNNI tiles, AMX tiles).
// layout: kAuto packs as a model file's tensor would be on this path (interleaved
// where decode_prefers_interleaved); "other_layout" cases force the other one.
// from_l3: two copies instead of 640 MB, so a layer of up to 16 MB is read from L3:
// the kernel's own ceiling, above what memory gives.
void run_quantized(benchmark::State& state, const LinearShape& s, DType dt, int64_t M, Isa isa,
                   detail::QuantGemm gemm, QuantLayout layout = QuantLayout::kAuto, bool from_l3 = false) {
  static std::string key;
  static std::vector<PackedLinear> copies;
  ScopedIsa force(isa);
  if (layout == QuantLayout::kAuto) {
    layout = detail::decode_prefers_interleaved(dt) ? QuantLayout::kInterleaved : QuantLayout::kRows;
  }
  const std::string want = std::to_string(s.K) + "x" + std::to_string(s.N) + std::string(dtype_name(dt)) +
                           std::to_string(static_cast<int>(layout)) + (from_l3 ? "L3" : "");
  if (key != want) {
    copies.clear();
    const Tensor weight = Tensor::from_f32(random_floats(static_cast<size_t>(s.N * s.K), 1), {s.N, s.K}).to(dt);
    const int64_t n = from_l3 ? 2 : std::max<int64_t>(2, static_cast<int64_t>((size_t{640} << 20) / weight.nbytes()));
    // Quantized packing reads rows in place, so each copy needs its own storage.
    for (int64_t i = 0; i < n; ++i) copies.push_back(PackedLinear::pack(weight.clone(), nullptr, layout).value());
    key = want;
  }
  detail::set_quantized_gemm_limit(gemm);
  time_round_robin(state, copies, s, M);
  detail::set_quantized_gemm_limit(detail::QuantGemm::kAmx);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(dtype_bytes(dt, s.N * s.K)) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * s.N * s.K * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

#if defined(LOOM_MATMUL_X86)
LOOM_TARGET_AVX2 uint64_t sum_words(const uint64_t* p, int64_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  const __m256i a = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#else
uint64_t sum_words(const uint64_t* p, int64_t n) {
  uint64_t s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}
#endif

// The machine's read bandwidth on the pool's threads: 640 MB summed, each thread
// a contiguous share, `bytes` per call from a rotating offset (as the layers do).
void run_memory_read(benchmark::State& state, size_t bytes) {
  static std::shared_ptr<void> buf;
  constexpr size_t kTotal = size_t{640} << 20;
  if (!buf) {
    buf = allocate_aligned(kTotal);
    std::memset(buf.get(), 1, kTotal);
  }
  const uint64_t* words = static_cast<const uint64_t*>(buf.get());
  const int64_t per_call = static_cast<int64_t>(bytes / 8);
  const int64_t calls = static_cast<int64_t>(kTotal / bytes);
  ThreadPool& pool = ThreadPool::global();
  int64_t next = 0;
  std::vector<uint64_t> sums(static_cast<size_t>(pool.num_threads()));
  for (auto _ : state) {
    const uint64_t* base = words + next * per_call;
    pool.parallel_for(per_call / 16, [&](int64_t b, int64_t e, int t) {
      sums[static_cast<size_t>(t)] += sum_words(base + 16 * b, 16 * (e - b));
    });
    next = (next + 1) % calls;
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

std::string shape_name(const LinearShape& s) { return std::to_string(s.K) + "->" + std::to_string(s.N); }

void register_all() {
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF16};
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (isa_supported(isa)) isas.push_back(isa);
  }
  auto add = [](const std::string& name, std::function<void(benchmark::State&)> fn) {
    benchmark::RegisterBenchmark(name.c_str(), [fn](benchmark::State& st) { fn(st); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  };
  for (int64_t M : {int64_t{1}, int64_t{512}}) {
    const std::string kind = M == 1 ? "gemv" : "gemm";
    for (DType dt : dtypes) {
      for (const LinearShape& s : kShapes) {
        if (M > 1 && s.N > 8192) continue;  // 270 GFLOP per call: minutes per case
        const std::string base = kind + "/" + std::string(dtype_name(dt)) + "/" + shape_name(s) + "/";
        for (Isa isa : isas) {
          if (isa == Isa::kAvx512Bf16 && dt != DType::kBF16) continue;  // same kernels as AVX512
          add(base + "loom_" + std::string(isa_name(isa)),
              [=](benchmark::State& st) { run_case(st, s, dt, Impl::kLoom, M, isa); });
        }
        if (baseline::OnednnLinear::available() && dt != DType::kF16) {
          add(base + "onednn", [=](benchmark::State& st) { run_case(st, s, dt, Impl::kOnednn, M, best_isa()); });
        }
        if (dt == DType::kF32) {
          add(base + "openblas", [=](benchmark::State& st) { run_case(st, s, dt, Impl::kOpenblas, M, best_isa()); });
        }
      }
    }
  }
  // Panels per streaming tile call (TileArgs::panels) at decode sizes: 1 is one
  // panel at a time, 0 the kernels' own limit. Compare with
  // --benchmark_enable_random_interleaving=true on a shared machine.
  for (const LinearShape& s : {LinearShape{2048, 8192}, LinearShape{8192, 2048}, LinearShape{2048, 128256}}) {
    for (DType dt : {DType::kBF16, DType::kF32}) {
      for (int64_t M : {1, 2, 4}) {
        for (int limit : {1, 2, 0}) {
          add("panels/" + std::string(dtype_name(dt)) + "/" + shape_name(s) + "/M=" + std::to_string(M) +
                  "/limit=" + std::to_string(limit),
              [=](benchmark::State& st) {
                detail::set_stream_panels_limit(limit);
                run_case(st, s, dt, Impl::kLoom, M, best_isa());
                detail::set_stream_panels_limit(0);
              });
        }
      }
    }
  }
  // Threads taking chunks of each other's share once done with their own
  // (set_work_stealing) against static equal shares.
  for (const LinearShape& s : {LinearShape{2048, 8192}, LinearShape{8192, 2048}, LinearShape{2048, 128256}}) {
    for (int64_t M : {1, 512}) {
      if (M > 1 && s.N > 8192) continue;
      for (bool steal : {false, true}) {
        add("share/BF16/" + shape_name(s) + "/M=" + std::to_string(M) + (steal ? "/steal" : "/static"),
            [=](benchmark::State& st) {
              detail::set_work_stealing(steal);
              run_case(st, s, DType::kBF16, Impl::kLoom, M, best_isa());
              detail::set_work_stealing(true);
            });
      }
    }
  }
  // Streaming with several row tiles (batched decode), bf16 weights from memory:
  // the next panel group prefetched over a whole group's tiles (set_stream_group_
  // prefetch) or streamed by each group's first tile just ahead of its reads.
  for (const LinearShape& s : {LinearShape{2048, 8192}, LinearShape{8192, 2048}, LinearShape{2048, 2048}}) {
    for (int64_t M : {16, 32, 64, 128}) {
      for (bool on : {false, true}) {
        add("memory/BF16/" + shape_name(s) + "/M=" + std::to_string(M) + (on ? "/group_prefetch" : "/on_demand"),
            [=](benchmark::State& st) { run_from_memory(st, s, M, on); });
      }
    }
  }
  // Quantized weights at 1B-model shapes from memory, on the best path and on AVX2
  // (maddubs), against a plain read of the same size per call; batched sizes also
  // without AMX, on the AVX512-VNNI tiles ("AVX512/vnni") and the row kernels
  // ("AVX512/rows"), and on AVX2 on the row kernels ("AVX2/rows"; plain AVX2 is the
  // AVX2 tiles).
  for (const LinearShape& s : {LinearShape{2048, 2048}, LinearShape{2048, 8192}, LinearShape{8192, 2048}}) {
    // (The level types loom quantizes to as well: Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4.)
    for (DType dt : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ4_1, DType::kQ5_0,
                     DType::kQ5_1, DType::kIQ4_NL, DType::kMXFP4}) {
      for (int64_t M : {1, 4, 8, 16, 32, 64, 512}) {
        for (Isa isa : isas) {
          if (isa == Isa::kAvx512Bf16) continue;  // same quantized kernels as AVX512
          const std::string name = "quant/" + std::string(dtype_name(dt)) + "/" + shape_name(s) + "/M=" +
                                   std::to_string(M) + "/" + std::string(isa_name(isa));
          add(name, [=](benchmark::State& st) { run_quantized(st, s, dt, M, isa, detail::QuantGemm::kAmx); });
          if (M == 1 && isa != Isa::kScalar) {
            add(name + "/from_l3", [=](benchmark::State& st) {
              run_quantized(st, s, dt, M, isa, detail::QuantGemm::kAmx, QuantLayout::kAuto, true);
            });
          }
          if (M > 1 && isa == Isa::kAvx512) {
            add(name + "/vnni", [=](benchmark::State& st) { run_quantized(st, s, dt, M, isa, detail::QuantGemm::kVnni); });
            add(name + "/rows", [=](benchmark::State& st) { run_quantized(st, s, dt, M, isa, detail::QuantGemm::kRows); });
          }
          if (M > 1 && isa == Isa::kAvx2) {
            add(name + "/rows", [=](benchmark::State& st) { run_quantized(st, s, dt, M, isa, detail::QuantGemm::kRows); });
          }
          // The other layout than the path's own: stored rows where it interleaves, and back.
          if (detail::interleaved_group_rows(dt) > 1 && isa != Isa::kScalar) {
            add(name + "/other_layout", [=](benchmark::State& st) {
              ScopedIsa force(isa);
              const bool interleaves = detail::decode_prefers_interleaved(dt);
              run_quantized(st, s, dt, M, isa, detail::QuantGemm::kAmx,
                            interleaves ? QuantLayout::kRows : QuantLayout::kInterleaved);
              st.SetLabel(interleaves ? "rows" : "interleaved");
            });
          }
        }
      }
    }
  }
  for (size_t mb : {2, 8, 32}) {
    add("memory/read/" + std::to_string(mb) + "MB", [=](benchmark::State& st) { run_memory_read(st, mb << 20); });
  }
  // Row sweep for the streaming/blocked switch (stream_max_rows in matmul.cc): the
  // same layer with each strategy forced; 14336→1024 has panels too big for L2.
  for (const LinearShape& s : {LinearShape{2048, 8192}, LinearShape{8192, 2048}, LinearShape{2048, 2048}, LinearShape{2048, 128256}, LinearShape{14336, 1024}}) {
    for (DType dt : {DType::kBF16, DType::kF32}) {
      for (int64_t M : {1, 4, 8, 16, 32, 64, 128}) {
        for (bool stream : {true, false}) {
          add("rows/" + std::string(dtype_name(dt)) + "/" + shape_name(s) + "/M=" + std::to_string(M) +
                  (stream ? "/stream" : "/blocked"),
              [=](benchmark::State& st) {
                detail::set_stream_max_rows(stream ? M : 0);
                run_case(st, s, dt, Impl::kLoom, M, best_isa());
                detail::set_stream_max_rows(-1);
              });
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom::cpu

int main(int argc, char** argv) {
  loom::cpu::baseline::OpenblasLinear::set_num_threads(loom::ThreadPool::global().num_threads());
  std::printf("loom threads %d, code path %s, cpu: %s\nOpenBLAS kernels: %s\n", loom::ThreadPool::global().num_threads(),
              loom::cpu::isa_name().c_str(), loom::cpu::cpu_features_string().c_str(),
              loom::cpu::baseline::OpenblasLinear::core_name().c_str());
  if (loom::cpu::baseline::OpenblasLinear::core_name() == "Prescott" && loom::cpu::isa_supported(loom::cpu::Isa::kAvx512)) {
    std::printf("  (OpenBLAS did not recognise this CPU; rerun with OPENBLAS_CORETYPE=COOPERLAKE for its AVX-512 kernels)\n");
  }
  // LOOM_BENCH_MATMUL_PRECISION=medium: the loom_AVX512 cases (and rows/, share/, ...) run
  // bf16 weights on bf16 dot products where the CPU has them (set_matmul_precision).
  if (const char* p = std::getenv("LOOM_BENCH_MATMUL_PRECISION"); p && *p) {
    const auto precision = loom::cpu::matmul_precision_from_name(p);
    if (!precision.ok()) {
      std::fprintf(stderr, "LOOM_BENCH_MATMUL_PRECISION: %s\n", precision.status().message().c_str());
      return 2;
    }
    loom::cpu::set_matmul_precision(precision.value());
  }
  loom::cpu::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
