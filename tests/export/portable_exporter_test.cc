// export_portable: the .lpte file is run by its consumer, loom_portable's C API
// (no loom inside), and compared with loom's own run of the same tokens —
// prefill logits at every position (in chunks smaller than the prompt), a
// decode step, and a 16-token greedy generation — for both backends. It also
// leaves the programs and loom's greedy tokens in <build>/portable_programs for
// loom_portable_tests, which run them without linking loom.
#include "loom/export/portable_exporter.h"
#include "export/export_test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "loom/batching/model_runner.h"
#include "loom/runtime/kv_cache_contiguous.h"
#include "loom_portable.h"

namespace loom::exporting {
namespace {

namespace fs = std::filesystem;
using export_test::load;
using export_test::random_tokens;

fs::path programs_dir() {
  const fs::path d = fs::path(LOOM_BINARY_DIR) / "portable_programs";
  fs::create_directories(d);
  return d;
}

// loom's logits for every token of `chunk` at positions past.. (one sequence).
std::vector<float> loom_step(batching::ModelRunner& runner, graph::KvStore& cache, const std::vector<int32_t>& chunk,
                             int64_t past, batching::LogitsRows rows) {
  std::vector<batching::SequenceChunk> c{{chunk.data(), static_cast<int64_t>(chunk.size()), past}};
  const Tensor logits = runner.step(c, cache, rows).value();
  return std::vector<float>(logits.data_as<float>(), logits.data_as<float>() + logits.numel());
}

int32_t argmax(const float* v, int64_t n) { return static_cast<int32_t>(std::max_element(v, v + n) - v); }

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return d;
}

constexpr double kTol = 1e-4;
constexpr int kPrompt = 9, kGenerate = 16;

void check_parity(const std::string& fixture, const std::string& backend) {
  SCOPED_TRACE(fixture + " " + backend);
  auto model = load(fixture);
  const fs::path file = programs_dir() / (fixture + "-" + backend + ".lpte");
  PortableExportOptions o;
  o.backend = backend;
  o.max_tokens = 4;  // the 9-token prompt runs in chunks of 4, 4, 1
  o.max_positions = 64;
  PortableExportReport report;
  const Status s = export_portable(*model, file.string(), o, &report);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_GT(report.lowered.at("attention"), 0);
  EXPECT_LT(report.arena_bytes, report.unplanned_bytes) << "liveness lets activations share memory";

  lp_program* p = lp_program_load(file.string().c_str());
  ASSERT_NE(p, nullptr) << lp_last_error();
  EXPECT_EQ(lp_program_size(p), fs::file_size(file));
  EXPECT_EQ(lp_program_size(p), report.program_bytes);
  EXPECT_EQ(lp_program_arena_bytes(p), report.arena_bytes);
  EXPECT_STREQ(lp_program_backend(p), backend.c_str());
  const int64_t V = lp_program_vocab_size(p);
  ASSERT_EQ(V, model->vocab_size());

  auto runner = batching::ModelRunner::create(model).value();
  const std::vector<int32_t> prompt = random_tokens(*model, kPrompt, 1);
  runtime::ContiguousKvCache cache(runner->kv_layout(), 1, kPrompt + kGenerate + 2);
  const auto loom_prefill = loom_step(*runner, cache, prompt, 0, batching::LogitsRows::kAllTokens);
  std::vector<float> lp_prefill(static_cast<size_t>(kPrompt * V));
  ASSERT_EQ(lp_run_all(p, prompt.data(), kPrompt, 0, lp_prefill.data()), 0) << lp_error(p);
  const int32_t next = 11;
  const auto loom_decode = loom_step(*runner, cache, {next}, kPrompt, batching::LogitsRows::kLastOfEachSequence);
  std::vector<float> lp_decode(static_cast<size_t>(V));
  ASSERT_EQ(lp_run(p, &next, 1, kPrompt, lp_decode.data()), 0) << lp_error(p);
  const double prefill = max_diff(loom_prefill, lp_prefill), decode = max_diff(loom_decode, lp_decode);
  EXPECT_LE(prefill, kTol);
  EXPECT_LE(decode, kTol);

  // Greedy: loom's tokens (argmax of its own logits, fed back) and the program's.
  std::vector<int32_t> loom_tokens, lp_tokens;
  {
    runtime::ContiguousKvCache c(runner->kv_layout(), 1, kPrompt + kGenerate + 2);
    auto logits = loom_step(*runner, c, prompt, 0, batching::LogitsRows::kLastOfEachSequence);
    for (int i = 0; i < kGenerate; ++i) {
      loom_tokens.push_back(argmax(logits.data(), V));
      logits = loom_step(*runner, c, {loom_tokens.back()}, kPrompt + i, batching::LogitsRows::kLastOfEachSequence);
    }
  }
  std::vector<float> logits(static_cast<size_t>(V));
  ASSERT_EQ(lp_run(p, prompt.data(), kPrompt, 0, logits.data()), 0) << lp_error(p);
  for (int i = 0; i < kGenerate; ++i) {
    lp_tokens.push_back(argmax(logits.data(), V));
    ASSERT_EQ(lp_run(p, &lp_tokens.back(), 1, kPrompt + i, logits.data()), 0) << lp_error(p);
  }
  EXPECT_EQ(lp_tokens, loom_tokens);
  std::printf("[ portable ] %s %s max |Δlogits|: prefill %.2e decode %.2e; program %zu bytes, arena %llu (%llu without reuse), "
              "KV state %llu\n", fixture.c_str(), backend.c_str(), prefill, decode, lp_program_size(p),
              static_cast<unsigned long long>(report.arena_bytes), static_cast<unsigned long long>(report.unplanned_bytes),
              static_cast<unsigned long long>(report.state_bytes));
  lp_free(p);

  // For loom_portable_tests: the prompt and loom's greedy continuation.
  std::ofstream expected(programs_dir() / (fixture + ".greedy"));
  for (int32_t t : prompt) expected << t << ' ';
  expected << '\n';
  for (int32_t t : loom_tokens) expected << t << ' ';
  expected << '\n';
}

TEST(PortableExporter, LlamaReferenceMatchesLoom) { check_parity("llama-f32", "reference"); }
TEST(PortableExporter, LlamaCpuSimdMatchesLoom) { check_parity("llama-f32", "cpu_simd"); }
TEST(PortableExporter, Qwen3ReferenceMatchesLoom) { check_parity("qwen3-f32", "reference"); }
TEST(PortableExporter, Qwen3CpuSimdMatchesLoom) { check_parity("qwen3-f32", "cpu_simd"); }

// Every other f32 fixture (GPT-2's layer_norm/gelu, biases, sliding windows,
// llama3/yarn rope, phi3's fused projections …): prefill of 20 tokens (beyond
// the sliding fixtures' window) at every position and a decode step, on both
// backends. "dynamic" rope depends on the sequence length and is refused.
TEST(PortableExporter, EveryF32FixtureMatchesLoom) {
  const fs::path root = export_test::fixtures_dir();
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && e.path().filename().string().ends_with("-f32")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  ASSERT_GE(names.size(), 10u) << "fixtures missing in " << root;
  const fs::path dir = fs::temp_directory_path() / ("loom_portable_sweep_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    auto model = load(name);
    for (const std::string backend : {"reference", "cpu_simd"}) {
      const fs::path file = dir / (name + "-" + backend + ".lpte");
      PortableExportOptions o;
      o.backend = backend;
      o.max_tokens = 8;
      o.max_positions = 32;
      const Status s = export_portable(*model, file.string(), o);
      if (name.find("rope_dynamic") != std::string::npos) {
        EXPECT_FALSE(s.ok());
        EXPECT_NE(s.message().find("dynamic"), std::string::npos) << s.to_string();
        continue;
      }
      ASSERT_TRUE(s.ok()) << s.to_string();
      lp_program* p = lp_program_load(file.string().c_str());
      ASSERT_NE(p, nullptr) << lp_last_error();
      const int64_t V = lp_program_vocab_size(p);
      auto runner = batching::ModelRunner::create(model).value();
      const std::vector<int32_t> prompt = random_tokens(*model, 20, 3);
      runtime::ContiguousKvCache cache(runner->kv_layout(), 1, 24);
      const auto loom_prefill = loom_step(*runner, cache, prompt, 0, batching::LogitsRows::kAllTokens);
      const auto loom_decode = loom_step(*runner, cache, {7}, 20, batching::LogitsRows::kLastOfEachSequence);
      std::vector<float> prefill(static_cast<size_t>(20 * V)), decode(static_cast<size_t>(V));
      const int32_t next = 7;
      EXPECT_EQ(lp_run_all(p, prompt.data(), 20, 0, prefill.data()), 0) << lp_error(p);
      EXPECT_EQ(lp_run(p, &next, 1, 20, decode.data()), 0) << lp_error(p);
      const double dp = max_diff(loom_prefill, prefill), dd = max_diff(loom_decode, decode);
      EXPECT_LE(dp, kTol) << backend;
      EXPECT_LE(dd, kTol) << backend;
      std::printf("[ portable ] %-28s %-9s prefill %.2e decode %.2e arena %zu program %zu\n", name.c_str(), backend.c_str(), dp, dd,
                  lp_program_arena_bytes(p), lp_program_size(p));
      lp_free(p);
    }
  }
  fs::remove_all(dir);
}

// The plan: tensors whose lifetimes overlap never share bytes, and every one
// lies inside the arena.
TEST(PortableExporter, MemoryPlanNeverOverlapsLiveTensors) {
  auto model = load("llama-f32");
  PortableExportOptions o;
  o.max_tokens = 8;
  auto p = lower_portable(*model, o).value();
  const int n = static_cast<int>(p.ops.size());
  std::vector<int> first(p.tensors.size(), n + 1), last(p.tensors.size(), -1);
  for (const auto& [name, t] : p.inputs) first[static_cast<size_t>(t)] = -1;
  for (int i = 0; i < n; ++i) {
    for (int t : p.ops[static_cast<size_t>(i)].outputs) first[static_cast<size_t>(t)] = std::min(first[static_cast<size_t>(t)], i);
    for (int t : p.ops[static_cast<size_t>(i)].inputs)
      if (t >= 0) last[static_cast<size_t>(t)] = std::max(last[static_cast<size_t>(t)], i);
  }
  for (const auto& [name, t] : p.outputs) last[static_cast<size_t>(t)] = n;
  auto bytes = [&](const PortableTensor& t) {
    return static_cast<uint64_t>((t.row_kind == PortableRows::kFixed ? t.rows : p.max_tokens) * t.cols * 4);
  };
  int checked = 0;
  for (size_t a = 0; a < p.tensors.size(); ++a) {
    const PortableTensor& ta = p.tensors[a];
    if (ta.is_weight) continue;
    EXPECT_LE(ta.offset + bytes(ta), p.arena_bytes) << ta.name;
    for (size_t b = a + 1; b < p.tensors.size(); ++b) {
      const PortableTensor& tb = p.tensors[b];
      if (tb.is_weight) continue;
      const bool live_together = first[a] <= std::max(last[b], first[b]) && first[b] <= std::max(last[a], first[a]);
      if (!live_together) continue;
      ++checked;
      EXPECT_TRUE(ta.offset + bytes(ta) <= tb.offset || tb.offset + bytes(tb) <= ta.offset) << ta.name << " and " << tb.name;
    }
  }
  EXPECT_GT(checked, 0);
  EXPECT_LT(p.arena_bytes, p.unplanned_bytes);
}

TEST(PortableExporter, UnknownBackendIsAnErrorListingTheRegisteredOnes) {
  auto model = load("llama-f32");
  PortableExportOptions o;
  o.backend = "no_such_backend";
  const auto r = lower_portable(*model, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no_such_backend"), std::string::npos);
  EXPECT_NE(r.status().message().find("cpu_simd"), std::string::npos);
  EXPECT_NE(r.status().message().find("reference"), std::string::npos);
}

}  // namespace
}  // namespace loom::exporting
