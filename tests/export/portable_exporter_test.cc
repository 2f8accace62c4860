// export_portable: the .lpte file is run by its consumer, loom_portable's C API
// (no loom inside), and compared with loom's own run of the same tokens —
// prefill logits at every position (in chunks smaller than the prompt), a
// decode step, and a 16-token greedy generation — for both backends; then every
// f32 fixture variant static and dynamic, in batches of several loads, and the
// NTK-dynamic rope below and above max_position_embeddings. It also
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
#include <iterator>
#include <random>

#include "loom/batching/model_runner.h"
#include "loom/runtime/cpu/matmul.h"
#include "loom/runtime/kv_cache_contiguous.h"
#include "loom_portable.h"

namespace loom::exporting {
namespace portable_exporter_test {  // named: the test files of a program build as one unit

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
  // reference: every weight inline; cpu_simd: every weight in the sidecar
  // (loom_portable_tests damages copies of it)
  o.external_weights_threshold = backend == "reference" ? -1 : 0;
  PortableExportReport report;
  const Status s = export_portable(*model, file.string(), o, &report);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_GT(report.lowered.at("attention"), 0);
  if (model->config().model_type == "mixtral" || model->config().model_type == "qwen2_moe")
    EXPECT_GT(report.lowered["moe"], 0) << "the routed experts run as the runtime's moe op";
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
// Routed experts (top-2 of 4 / 8 experts; Qwen2-MoE with its sigmoid-gated shared expert).
TEST(PortableExporter, MixtralReferenceMatchesLoom) { check_parity("mixtral-f32", "reference"); }
TEST(PortableExporter, MixtralCpuSimdMatchesLoom) { check_parity("mixtral-f32", "cpu_simd"); }
TEST(PortableExporter, Qwen2MoeReferenceMatchesLoom) { check_parity("qwen2_moe-f32", "reference"); }
TEST(PortableExporter, Qwen2MoeCpuSimdMatchesLoom) { check_parity("qwen2_moe-f32", "cpu_simd"); }

// The variants scripts/make-fixtures wrote (fixtures/index.json) with the given dtype.
std::vector<std::string> fixture_variants(const std::string& dtype) {
  std::ifstream in(export_test::fixtures_dir() / "index.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  // {"name": "llama-f32", "arch": …, "dtype": "f32", …}: the names ending in -<dtype>.
  for (size_t at = text.find("\"name\""); at != std::string::npos; at = text.find("\"name\"", at + 1)) {
    const size_t q1 = text.find('"', text.find(':', at) + 1), q2 = text.find('"', q1 + 1);
    const std::string name = text.substr(q1 + 1, q2 - q1 - 1);
    if (name.ends_with("-" + dtype)) out.push_back(name);
  }
  return out;
}

// loom's logits for several sequences in one batched step (rows: every token of
// each, or the last of each), split per sequence.
std::vector<std::vector<float>> loom_batch(batching::ModelRunner& runner, graph::KvStore& cache,
                                           const std::vector<std::vector<int32_t>>& chunks, const std::vector<int64_t>& past,
                                           batching::LogitsRows rows, int64_t V) {
  std::vector<batching::SequenceChunk> c;
  for (size_t i = 0; i < chunks.size(); ++i) c.push_back({chunks[i].data(), static_cast<int64_t>(chunks[i].size()), past[i]});
  const Tensor logits = runner.step(c, cache, rows).value();
  const float* d = logits.data_as<float>();
  std::vector<std::vector<float>> out;
  for (const auto& chunk : chunks) {
    const int64_t n = rows == batching::LogitsRows::kAllTokens ? static_cast<int64_t>(chunk.size()) : 1;
    out.emplace_back(d, d + n * V);
    d += n * V;
  }
  return out;
}

struct Variant {
  bool dynamic;
  std::string backend;
  int64_t threshold;  // external_weights_threshold
};

// One exported program against loom: prefills of several lengths (spanning
// chunks of max_tokens) at every position, each followed by a decode step
// with the cache; then a batch of two sequences of different lengths, run by
// two loads of the file, against loom's batched step, and a decode step of both.
void check_variant(const std::string& fixture, const std::shared_ptr<const models::Model>& model, const Variant& v,
                   const fs::path& dir) {
  const std::string tag = fixture + (v.dynamic ? " dynamic " : " static ") + v.backend +
                          (v.threshold >= 0 ? " external≥" + std::to_string(v.threshold) : " inline");
  SCOPED_TRACE(tag);
  const fs::path file = dir / (fixture + (v.dynamic ? "-dyn-" : "-static-") + v.backend + ".lpte");
  PortableExportOptions o;
  o.backend = v.backend;
  o.dynamic = v.dynamic;
  o.max_tokens = 8;
  o.max_positions = 48;
  o.external_weights_threshold = v.threshold;
  PortableExportReport report;
  const Status s = export_portable(*model, file.string(), o, &report);
  ASSERT_TRUE(s.ok()) << s.to_string();
  if (v.threshold >= 0) {
    EXPECT_GT(report.external_weights, 0u);
    EXPECT_TRUE(fs::exists(file.string() + ".weights"));
  } else {
    EXPECT_EQ(report.external_weights, 0u);
    EXPECT_FALSE(fs::exists(file.string() + ".weights"));
  }
  lp_program* p = lp_program_load(file.string().c_str());
  ASSERT_NE(p, nullptr) << lp_last_error();
  EXPECT_EQ(lp_program_is_static(p), v.dynamic ? 0 : 1);
  EXPECT_EQ(lp_program_weights_file_size(p), report.weights_file_bytes);
  EXPECT_EQ(lp_program_verify_weights(p), 0) << lp_error(p);
  const int64_t V = lp_program_vocab_size(p);
  auto runner = batching::ModelRunner::create(model).value();
  double worst = 0;
  for (const int len : {1, 7, 20}) {
    SCOPED_TRACE("prompt of " + std::to_string(len));
    const std::vector<int32_t> prompt = random_tokens(*model, len, static_cast<uint32_t>(len));
    runtime::ContiguousKvCache cache(runner->kv_layout(), 1, len + 2);
    const auto loom_prefill = loom_step(*runner, cache, prompt, 0, batching::LogitsRows::kAllTokens);
    const int32_t next = 7;
    const auto loom_decode = loom_step(*runner, cache, {next}, len, batching::LogitsRows::kLastOfEachSequence);
    std::vector<float> prefill(static_cast<size_t>(len * V)), decode(static_cast<size_t>(V));
    ASSERT_EQ(lp_run_all(p, prompt.data(), len, 0, prefill.data()), 0) << lp_error(p);
    ASSERT_EQ(lp_run(p, &next, 1, len, decode.data()), 0) << lp_error(p);
    const double dp = max_diff(loom_prefill, prefill), dd = max_diff(loom_decode, decode);
    EXPECT_LE(dp, kTol);
    EXPECT_LE(dd, kTol);
    worst = std::max({worst, dp, dd});
  }
  {
    SCOPED_TRACE("batch of two");
    const std::vector<std::vector<int32_t>> prompts = {random_tokens(*model, 11, 21), random_tokens(*model, 5, 22)};
    runtime::ContiguousKvCache cache(runner->kv_layout(), 2, 16);
    const auto loom_prefill = loom_batch(*runner, cache, prompts, {0, 0}, batching::LogitsRows::kAllTokens, V);
    const auto loom_decode = loom_batch(*runner, cache, {{9}, {10}}, {11, 5}, batching::LogitsRows::kLastOfEachSequence, V);
    lp_program* second = lp_program_load(file.string().c_str());
    ASSERT_NE(second, nullptr) << lp_last_error();
    lp_program* seq[2] = {p, second};
    std::vector<float> out[2];
    for (int i = 0; i < 2; ++i) {  // interleaved: the two loads keep separate KV states
      out[i].resize(prompts[static_cast<size_t>(i)].size() * static_cast<size_t>(V));
      ASSERT_EQ(lp_run_all(seq[i], prompts[static_cast<size_t>(i)].data(), static_cast<int64_t>(prompts[static_cast<size_t>(i)].size()),
                           0, out[i].data()),
                0)
          << lp_error(seq[i]);
    }
    for (int i = 0; i < 2; ++i) EXPECT_LE(max_diff(loom_prefill[static_cast<size_t>(i)], out[i]), kTol) << "sequence " << i;
    for (int i = 0; i < 2; ++i) {
      const int32_t next = 9 + i;
      std::vector<float> d(static_cast<size_t>(V));
      ASSERT_EQ(lp_run(seq[i], &next, 1, static_cast<int64_t>(prompts[static_cast<size_t>(i)].size()), d.data()), 0) << lp_error(seq[i]);
      const double dd = max_diff(loom_decode[static_cast<size_t>(i)], d);
      EXPECT_LE(dd, kTol) << "decode of sequence " << i;
      worst = std::max(worst, dd);
    }
    lp_free(second);
  }
  std::printf("[ portable ] %-26s %-7s %-9s %-13s max |Δlogits| %.2e; program %zu + weights file %zu bytes, arena %zu\n",
              fixture.c_str(), v.dynamic ? "dynamic" : "static", v.backend.c_str(),
              v.threshold >= 0 ? "external" : "inline", worst, lp_program_size(p), lp_program_weights_file_size(p),
              lp_program_arena_bytes(p));
  lp_free(p);
}

// Every fixture variant (GPT-2's layer_norm/gelu, biases, sliding windows,
// linear/llama3/yarn/dynamic rope, phi3's fused projections, Mixtral's and
// Qwen2-MoE's routed experts, …), f32 and bf16
// checkpoints (the program holds the bf16 weights converted to f32, exactly;
// loom computes in f32 too, so the same 1e-4 holds), static and dynamic, on
// both backends, weights inline and in the sidecar file — or, for an
// architecture on the portable skip list, refused with its reason.
TEST(PortableExporter, EveryVariantStaticAndDynamicMatchesLoomOrIsOnTheSkipList) {
  // The portable programs compute in f32: they are held to loom's exact products.
  cpu::ScopedMatmulPrecision highest(cpu::MatmulPrecision::kHighest);
  auto variants = fixture_variants("f32");
  ASSERT_GE(variants.size(), 10u) << "fixtures missing in " << export_test::fixtures_dir();
  for (const std::string& v : fixture_variants("bf16")) variants.push_back(v);
  for (const std::string arch : {"mixtral", "qwen2_moe"})
    EXPECT_NE(std::find(variants.begin(), variants.end(), arch + "-f32"), variants.end()) << arch << " fixtures missing";
  const fs::path dir = fs::temp_directory_path() / ("loom_portable_sweep_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const std::string& name : variants) {
    auto model = load(name);
    if (const std::string why = portable_export_skip_reason(model->config().model_type); !why.empty()) {
      const Status s = export_portable(*model, (dir / "skipped.lpte").string(), {});
      EXPECT_FALSE(s.ok()) << name << " is on the skip list";
      EXPECT_NE(s.message().find(why), std::string::npos) << s.to_string();
      std::printf("[ portable ] %s: skipped: %s\n", name.c_str(), why.c_str());
      continue;
    }
    if (model->config().rope_scaling.rope_type == "longrope") {  // its tables depend on the sequence length
      const Status s = export_portable(*model, (dir / "skipped.lpte").string(), {});
      EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.to_string();
      EXPECT_NE(s.message().find("longrope"), std::string::npos) << s.to_string();
      continue;
    }
    for (const Variant& v : {Variant{true, "reference", 256}, Variant{true, "cpu_simd", -1}, Variant{false, "reference", -1},
                             Variant{false, "cpu_simd", 0}})
      check_variant(name, model, v, dir);
  }
  fs::remove_all(dir);
}

// NTK-dynamic rope (llama_rope_dynamic: max_position_embeddings 32, factor 2):
// the runtime computes the frequencies from the sequence length. Below 32 they
// are the default ones; above, every call scales them by its length, as loom
// does per step — a 40-token prompt in one call (chunked by 8 inside), and
// decode steps from position 28 across 32.
TEST(PortableExporter, DynamicRopeMatchesLoomBelowAndAboveMaxPositionEmbeddings) {
  auto model = load("llama_rope_dynamic-f32");
  ASSERT_EQ(model->config().max_position_embeddings, 32);
  const fs::path dir = fs::temp_directory_path() / ("loom_portable_dynrope_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto runner = batching::ModelRunner::create(model).value();
  for (const bool dynamic : {true, false})
    for (const std::string backend : {"reference", "cpu_simd"}) {
      SCOPED_TRACE(backend + (dynamic ? " dynamic" : " static"));
      PortableExportOptions o;
      o.backend = backend;
      o.dynamic = dynamic;
      o.max_tokens = 8;
      o.max_positions = 64;  // past max_position_embeddings
      const fs::path file = dir / (backend + (dynamic ? "-dyn" : "-static") + ".lpte");
      PortableExportReport report;
      ASSERT_TRUE(export_portable(*model, file.string(), o, &report).ok());
      lp_program* p = lp_program_load(file.string().c_str());
      ASSERT_NE(p, nullptr) << lp_last_error();
      const int64_t V = lp_program_vocab_size(p);
      // A prompt of 40 in one call: every row against loom's one step.
      const std::vector<int32_t> long_prompt = random_tokens(*model, 40, 5);
      runtime::ContiguousKvCache cache(runner->kv_layout(), 1, 64);
      const auto loom_long = loom_step(*runner, cache, long_prompt, 0, batching::LogitsRows::kAllTokens);
      std::vector<float> lp_long(static_cast<size_t>(40 * V));
      ASSERT_EQ(lp_run_all(p, long_prompt.data(), 40, 0, lp_long.data()), 0) << lp_error(p);
      const double above = max_diff(loom_long, lp_long);
      EXPECT_LE(above, kTol);
      // The same prompt's first 20 rows, run as 20 (below 32), are the default
      // frequencies — they differ from the 40-token call's (the scaling is live).
      std::vector<float> lp_short(static_cast<size_t>(20 * V));
      ASSERT_EQ(lp_run_all(p, long_prompt.data(), 20, 0, lp_short.data()), 0) << lp_error(p);
      runtime::ContiguousKvCache cache2(runner->kv_layout(), 1, 64);
      const auto loom_short = loom_step(*runner, cache2, {long_prompt.begin(), long_prompt.begin() + 20}, 0,
                                        batching::LogitsRows::kAllTokens);
      const double below = max_diff(loom_short, lp_short);
      EXPECT_LE(below, kTol);
      EXPECT_GT(max_diff(std::vector<float>(lp_long.begin(), lp_long.begin() + 20 * V), lp_short), 1e-3)
          << "frequencies at length 40 should differ from those at 20";
      // Decode from 28 across 32: each step's length is its position + 1.
      runtime::ContiguousKvCache cache3(runner->kv_layout(), 1, 64);
      const std::vector<int32_t> prompt(long_prompt.begin(), long_prompt.begin() + 28);
      loom_step(*runner, cache3, prompt, 0, batching::LogitsRows::kLastOfEachSequence);
      std::vector<float> logits(static_cast<size_t>(V));
      ASSERT_EQ(lp_run(p, prompt.data(), 28, 0, logits.data()), 0) << lp_error(p);
      double decode = 0;
      for (int64_t pos = 28; pos < 36; ++pos) {
        const int32_t t = static_cast<int32_t>(3 + pos);
        const auto loom_d = loom_step(*runner, cache3, {t}, pos, batching::LogitsRows::kLastOfEachSequence);
        ASSERT_EQ(lp_run(p, &t, 1, pos, logits.data()), 0) << lp_error(p);
        decode = std::max(decode, max_diff(loom_d, logits));
      }
      EXPECT_LE(decode, kTol);
      std::printf("[ portable ] dynamic rope %s %s: max |Δlogits| 20 tokens %.2e, 40 tokens %.2e, decode 28→36 %.2e\n",
                  backend.c_str(), dynamic ? "dynamic" : "static", below, above, decode);
      lp_free(p);
    }
  fs::remove_all(dir);
}

// A bf16 checkpoint's matrices stay bf16 (keep_bf16, the default): half the
// bytes, and the same logits as a program holding f32 copies (the kernels
// widen each value exactly): bit for bit with the reference kernels, to f32
// rounding with the vector ones; norm weights (and Qwen2-MoE's shared-expert
// gate vector) stay f32, a moe's router and expert matrices stay bf16.
TEST(PortableExporter, Bf16WeightsGiveTheSameLogitsAsF32CopiesAtHalfTheBytes) {
  for (const std::string fixture : {"llama-bf16", "mixtral-bf16", "qwen2_moe-bf16"}) {
    SCOPED_TRACE(fixture);
    auto model = load(fixture);
    const fs::path dir = fs::temp_directory_path() / ("loom_portable_bf16_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::vector<int32_t> prompt = random_tokens(*model, 13, 8);
    std::map<std::string, std::vector<float>> logits;
    size_t bytes[2] = {};
    for (const bool keep : {true, false})
      for (const std::string backend : {"reference", "cpu_simd"}) {
        SCOPED_TRACE(backend + (keep ? " bf16" : " f32"));
        PortableExportOptions o;
        o.backend = backend;
        o.keep_bf16 = keep;
        o.max_tokens = 4;
        o.max_positions = 32;
        o.external_weights_threshold = backend == "reference" ? -1 : 0;
        PortableExportReport report;
        const fs::path file = dir / (backend + (keep ? "-bf16" : "-f32") + ".lpte");
        ASSERT_TRUE(export_portable(*model, file.string(), o, &report).ok());
        auto lowered = lower_portable(*model, o).value();
        int bf16 = 0;
        for (const auto& t : lowered.tensors) bf16 += t.is_bf16;
        EXPECT_EQ(bf16 > 0, keep);
        for (const auto& op : lowered.ops) {
          auto is_bf16 = [&](size_t i) { return lowered.tensors[static_cast<size_t>(op.inputs[i])].is_bf16; };
          if (op.op == "rms_norm") EXPECT_FALSE(is_bf16(1)) << op.scope;
          if (op.op == "moe") {
            for (size_t i = 1; i <= 3; ++i) EXPECT_EQ(is_bf16(i), keep) << op.scope << " input " << i;
            if (op.inputs.size() > 5 && op.inputs[5] >= 0) EXPECT_FALSE(is_bf16(5)) << op.scope << " shared gate";
          }
        }
        lp_program* p = lp_program_load(file.string().c_str());
        ASSERT_NE(p, nullptr) << lp_last_error();
        std::vector<float> out(static_cast<size_t>(13 * lp_program_vocab_size(p)));
        ASSERT_EQ(lp_run_all(p, prompt.data(), 13, 0, out.data()), 0) << lp_error(p);
        lp_free(p);
        logits[backend + (keep ? "-bf16" : "-f32")] = out;
        bytes[keep ? 0 : 1] = report.weight_bytes;
      }
    EXPECT_EQ(logits["reference-bf16"], logits["reference-f32"]);
    // f32 rounding only: the bf16 and f32 vector dots round differently (llama
    // ~7e-6, the moe fixtures ~1.2e-5, whose routing weights multiply it).
    EXPECT_LE(max_diff(logits["cpu_simd-bf16"], logits["cpu_simd-f32"]), 3e-5);
    EXPECT_LT(bytes[0], bytes[1] * 6 / 10) << "bf16 matrices should halve the weights";
    fs::remove_all(dir);
  }
}

// A threshold moves every weight at least that large into the sidecar (64-byte
// aligned, its size recorded); the program shrinks by their bytes.
TEST(PortableExporter, ThresholdMovesLargeWeightsToTheWeightsFile) {
  auto model = load("llama-f32");
  PortableExportOptions o;
  auto p = lower_portable(*model, o).value();
  const fs::path dir = fs::temp_directory_path() / ("loom_portable_weights_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  PortableExportReport inline_r, ext_r;
  ASSERT_TRUE(write_portable(p, (dir / "inline.lpte").string(), -1, &inline_r).ok());
  ASSERT_TRUE(write_portable(p, (dir / "ext.lpte").string(), 1024, &ext_r).ok());
  EXPECT_EQ(inline_r.external_weights, 0u);
  EXPECT_GT(ext_r.external_weights, 0u);
  EXPECT_LT(ext_r.program_bytes + 4 * 1024 * ext_r.external_weights, inline_r.program_bytes);
  EXPECT_EQ(fs::file_size(dir / "ext.lpte.weights"), ext_r.weights_file_bytes);
  EXPECT_EQ(ext_r.weights_file_bytes % 64, 0u);
  // Re-exporting inline removes a stale sidecar.
  ASSERT_TRUE(write_portable(p, (dir / "ext.lpte").string(), -1).ok());
  EXPECT_FALSE(fs::exists(dir / "ext.lpte.weights"));
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

// The skip list is empty now; its refusal path still works: an entry added
// for the scope refuses the architecture with the reason (export and
// lowering), and the architecture exports again once the entry is gone.
TEST(PortableExporter, SkipListRefusesAListedArchitectureWithItsReason) {
  for (const auto& [type, why] : portable_export_skips()) EXPECT_FALSE(why.empty()) << type << " is listed without a reason";
  auto model = load("mixtral-f32");
  const fs::path dir = fs::temp_directory_path() / ("loom_portable_skip_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "m.lpte").string();
  {
    ScopedPortableSkip skip("mixtral", "a reason only this test gives");
    EXPECT_EQ(portable_export_skip_reason("mixtral"), "a reason only this test gives");
    const Status s = export_portable(*model, file, {});
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.to_string();
    EXPECT_NE(s.message().find("a reason only this test gives"), std::string::npos) << s.to_string();
    EXPECT_FALSE(lower_portable(*model, {}).ok());
    EXPECT_FALSE(fs::exists(file));
  }
  EXPECT_EQ(portable_export_skip_reason("mixtral"), "");
  EXPECT_TRUE(export_portable(*model, file, {}).ok());
  fs::remove_all(dir);
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

}  // namespace portable_exporter_test
}  // namespace loom::exporting
