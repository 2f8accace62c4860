// export_onnx: the exported file is run by its consumer, ONNX Runtime
// (onnxruntime-node, driven by tests/oracles/run_onnx.js), and compared with
// loom's own run of the same tokens — prefill logits at every position, a decode
// step fed with the present K/V, a left-padded batch of two, and a 16-token
// greedy generation — and Debian's onnx checker accepts the file.
#include "loom/export/onnx_exporter.h"
#include "export/export_test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "loom/batching/generate.h"
#include "loom/batching/model_runner.h"

namespace loom::exporting {
namespace {

namespace fs = std::filesystem;
using export_test::load;
using export_test::random_tokens;
using nlohmann::json;

const fs::path kNodeModules = fs::path(LOOM_SOURCE_DIR) / ".cache" / "npm" / "node_modules";
const fs::path kRunner = fs::path(LOOM_SOURCE_DIR) / "tests" / "oracles" / "run_onnx.js";

fs::path scratch_root() { return fs::temp_directory_path() / ("loom_onnx_test_" + std::to_string(::getpid())); }

fs::path scratch(const std::string& what) {
  const fs::path d = scratch_root() / what;
  fs::create_directories(d);
  return d;
}

// Removes the exported files when the test program ends.
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(scratch_root(), ec);
  }
};
[[maybe_unused]] ::testing::Environment* const kCleanup = ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

// Runs tests/oracles/run_onnx.js on `request`; fails the test (not skips) when
// onnxruntime-node is missing.
json run_ort(const json& request) {
  if (!fs::exists(kNodeModules / "onnxruntime-node" / "package.json")) {
    ADD_FAILURE() << "onnxruntime-node is not installed in " << kNodeModules
                  << ": run scripts/install-test-oracles (it installs onnxruntime-node@1.30.0 there)";
    return json();
  }
  const fs::path dir = scratch("ort");
  const fs::path req = dir / "request.json", ans = dir / "answer.json";
  std::ofstream(req) << request.dump();
  fs::remove(ans);
  const std::string cmd = "NODE_PATH='" + kNodeModules.string() + "' node '" + kRunner.string() + "' '" + req.string() +
                          "' '" + ans.string() + "'";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    ADD_FAILURE() << "onnxruntime-node failed (exit " << rc << "): " << cmd;
    return json();
  }
  return json::parse(std::ifstream(ans));
}

void expect_checker_accepts(const fs::path& model) {
  const std::string cmd = "/usr/bin/python3 -c \"import onnx, sys; onnx.checker.check_model(sys.argv[1])\" '" +
                          model.string() + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "Debian's onnx checker rejected " << model
                                         << " (python3-onnx missing? run scripts/install-deps --test)";
}

// loom's logits for every token of each sequence's chunk, run as one packed step
// over `cache` (sequence i uses slot i).
std::vector<std::vector<float>> loom_step(batching::ModelRunner& runner, graph::KvStore& cache,
                                          const std::vector<std::vector<int32_t>>& chunks,
                                          const std::vector<int64_t>& past) {
  std::vector<batching::SequenceChunk> c;
  for (size_t i = 0; i < chunks.size(); ++i)
    c.push_back({chunks[i].data(), static_cast<int64_t>(chunks[i].size()), past[i]});
  const Tensor logits = runner.step(c, cache, batching::LogitsRows::kAllTokens).value();
  const int64_t v = logits.dim(1);
  std::vector<std::vector<float>> out;
  int64_t row = 0;
  for (const auto& ch : chunks) {
    out.emplace_back(logits.data_as<float>() + row * v, logits.data_as<float>() + (row + static_cast<int64_t>(ch.size())) * v);
    row += static_cast<int64_t>(ch.size());
  }
  return out;
}

// Largest |a − b| between loom's rows of one sequence and ONNX rows [b, s0 .. s0 + n) of a [B, S, V] output.
double max_diff(const std::vector<float>& loom, const json& onnx_step, int64_t b, int64_t s0) {
  const auto dims = onnx_step.at("dims").get<std::vector<int64_t>>();
  const auto& data = onnx_step.at("logits");
  const int64_t S = dims.at(1), V = dims.at(2), n = static_cast<int64_t>(loom.size()) / V;
  double d = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < V; ++j) {
      const double x = data[static_cast<size_t>((b * S + s0 + i) * V + j)].get<double>();
      d = std::max(d, std::fabs(x - loom[static_cast<size_t>(i * V + j)]));
      if (!std::isfinite(x)) return INFINITY;
    }
  return d;
}

json row(const std::vector<int64_t>& v) { return json::array({v}); }
std::vector<int64_t> iota(int64_t from, int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(from + i);
  return v;
}
std::vector<int64_t> to64(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

constexpr double kTol = 1e-4;

// Prefill + decode (batch 1), then a batch of two — B (na − 4 tokens) left-padded —
// with a decode step. Sliding-window fixtures need na beyond their window (16).
void check_parity(const std::string& fixture, int opset, bool check_with_onnx_checker, int na = 9,
                  std::shared_ptr<const models::Model> preloaded = nullptr) {
  SCOPED_TRACE(fixture + " opset " + std::to_string(opset));
  auto model = preloaded ? preloaded : load(fixture);
  const fs::path file = scratch(fixture) / "model.onnx";
  OnnxExportOptions o;
  o.opset = opset;
  OnnxExportReport report;
  const Status s = export_onnx(*model, file.string(), o, &report);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(report.capture.node_fix_rewrites.at("logits_for_every_position"), 1);
  EXPECT_GT(report.lowered.at("attention"), 0);
  EXPECT_TRUE(fs::exists(file.string() + ".data")) << "weights above the threshold go to external data";
  if (check_with_onnx_checker) expect_checker_accepts(file);

  auto runner = batching::ModelRunner::create(model).value();
  const int nb = na - 4;
  const std::vector<int32_t> a = random_tokens(*model, na, 1), b = random_tokens(*model, nb, 2);
  const int32_t next_a = 11, next_b = 12;

  // loom: A alone (prefill, decode), then A and B packed together (prefill, decode).
  runtime::ContiguousKvCache c1(runner->kv_layout(), 1, na + 2);
  const auto la = loom_step(*runner, c1, {a}, {0})[0];
  const auto la_dec = loom_step(*runner, c1, {{next_a}}, {na})[0];
  runtime::ContiguousKvCache c2(runner->kv_layout(), 2, na + 2);
  const auto lab = loom_step(*runner, c2, {a, b}, {0, 0});
  const auto lab_dec = loom_step(*runner, c2, {{next_a}, {next_b}}, {na, nb});

  // ONNX: the same, batch 1 then batch 2 with B left-padded by 4 (pad id 0, position 1 as in Optimum).
  json steps = json::array();
  steps.push_back({{"input_ids", row(to64(a))}, {"attention_mask", row(std::vector<int64_t>(na, 1))},
                   {"position_ids", row(iota(0, na))}, {"feed_past", false}});
  steps.push_back({{"input_ids", row({next_a})}, {"attention_mask", row(std::vector<int64_t>(na + 1, 1))},
                   {"position_ids", row({na})}, {"feed_past", true}});
  std::vector<int64_t> b_padded(4, 0), b_mask(4, 0), b_pos(4, 1);
  for (int i = 0; i < nb; ++i) b_padded.push_back(b[static_cast<size_t>(i)]), b_mask.push_back(1), b_pos.push_back(i);
  steps.push_back({{"input_ids", {to64(a), b_padded}},
                   {"attention_mask", {std::vector<int64_t>(na, 1), b_mask}},
                   {"position_ids", {iota(0, na), b_pos}},
                   {"feed_past", false}});
  std::vector<int64_t> b_mask2 = b_mask;
  b_mask2.push_back(1);
  steps.push_back({{"input_ids", {{next_a}, {next_b}}},
                   {"attention_mask", {std::vector<int64_t>(na + 1, 1), b_mask2}},
                   {"position_ids", {{na}, {nb}}},
                   {"feed_past", true}});
  const json ans = run_ort({{"model", file.string()}, {"op", "steps"}, {"steps", steps}});
  ASSERT_TRUE(ans.contains("steps"));
  const auto& st = ans["steps"];
  const double prefill = max_diff(la, st[0], 0, 0), decode = max_diff(la_dec, st[1], 0, 0);
  const double batch_a = max_diff(lab[0], st[2], 0, 0), batch_b = max_diff(lab[1], st[2], 1, 4);
  const double dec_a = max_diff(lab_dec[0], st[3], 0, 0), dec_b = max_diff(lab_dec[1], st[3], 1, 0);
  EXPECT_LE(prefill, kTol);
  EXPECT_LE(decode, kTol);
  EXPECT_LE(batch_a, kTol);
  EXPECT_LE(batch_b, kTol) << "left-padded sequence";
  EXPECT_LE(dec_a, kTol);
  EXPECT_LE(dec_b, kTol) << "left-padded sequence, decode";
  EXPECT_EQ(st[1]["present0"][2].get<int64_t>(), na + 1) << "present = past ⧺ new";
  std::printf("[ onnx ] %s opset %d max |Δlogits|: prefill %.2e decode %.2e batch %.2e/%.2e batch decode %.2e/%.2e\n",
              fixture.c_str(), opset, prefill, decode, batch_a, batch_b, dec_a, dec_b);
}

TEST(OnnxExporter, LlamaMatchesLoomOnPrefillDecodeAndPaddedBatch) { check_parity("llama-f32", 17, true); }
TEST(OnnxExporter, Qwen2WithBiasMatchesLoom) { check_parity("qwen2-f32", 17, true); }
TEST(OnnxExporter, Qwen3WithQkNormMatchesLoom) { check_parity("qwen3-f32", 17, true); }
TEST(OnnxExporter, MistralSlidingWindowMatchesLoom) { check_parity("mistral_sliding-f32", 17, true, 23); }
TEST(OnnxExporter, Qwen2SlidingWindowMatchesLoom) { check_parity("qwen2_sliding-f32", 17, true, 23); }
TEST(OnnxExporter, Llama3RopeMatchesLoom) { check_parity("llama_rope_llama3-f32", 17, true); }
TEST(OnnxExporter, YarnRopeMatchesLoom) { check_parity("llama_rope_yarn-f32", 17, true); }
TEST(OnnxExporter, EveryOtherF32FixtureMatchesLoom) {
  // GPT-2 (LayerNorm, gelu_new, learned positions), Phi-3 (fused qkv, partial
  // rotary), one KV head / MHA, biases, linear and yarn-mscale rope.
  for (const char* f : {"gpt2-f32", "gpt2_legacy-f32", "phi3-f32", "llama_kv1_headdim-f32", "llama_mha_untied-f32",
                        "llama_bias-f32", "llama_rope_linear-f32", "llama_rope_yarn_mscale-f32"})
    check_parity(f, 17, true);
  check_parity("phi3_sliding-f32", 17, true, 23);
}

// A model loaded with fused kernels (one qkv projection split in three, the
// RMSNorm+MLP fusion's gate_up + silu_and_mul) lowers those ops too.
TEST(OnnxExporter, AModelWithFusedKernelsMatchesLoom) {
  check_parity("qwen2-f32-fused", 17, true, 9, load("qwen2-f32", export_test::fused_kernels()));
}

TEST(OnnxExporter, Bf16WeightsExportAsFloatAndMatchLoom) { check_parity("llama-bf16", 17, true); }

// Opset 14 exercises the ReduceMean model fix; 21 and 26 (ORT 1.30's newest) the axes-as-input
// form and newer IR versions, which Debian's onnx 1.12 checker cannot read.
TEST(OnnxExporter, OlderAndNewerOpsetsMatchLoom) {
  check_parity("llama-f32", 14, true);
  for (int opset : {21, 26}) check_parity("qwen3-f32", opset, false);
}

TEST(OnnxExporter, GreedyGenerationWithItsOwnKvCacheEqualsLoom) {
  for (const char* fixture : {"llama-f32", "qwen3-f32", "mistral_sliding-f32"}) {
    SCOPED_TRACE(fixture);
    auto model = load(fixture);
    const fs::path file = scratch(std::string("greedy_") + fixture) / "model.onnx";
    ASSERT_TRUE(export_onnx(*model, file.string(), {}).ok());
    const std::vector<int32_t> prompt = random_tokens(*model, 6, 7);
    auto runner = batching::ModelRunner::create(model).value();
    batching::GenerateOptions go;
    go.max_new_tokens = 16;
    const batching::GenerateResult want = batching::generate(*runner, prompt, go).value();
    ASSERT_EQ(want.generated_ids.size(), 16u);
    const json ans = run_ort({{"model", file.string()}, {"op", "greedy"}, {"prompt", prompt}, {"new_tokens", 16}});
    ASSERT_TRUE(ans.contains("tokens"));
    EXPECT_EQ(ans["tokens"].get<std::vector<int32_t>>(), want.generated_ids);
  }
}

TEST(OnnxExporter, BadOptionsAndUnsupportedRopeFailNamingTheCause) {
  auto model = load("llama-f32");
  const std::string file = (scratch("bad") / "m.onnx").string();
  OnnxExportOptions o;
  o.ops = "ort";
  Status s = export_onnx(*model, file, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--onnx-ops ort"), std::string::npos) << s.to_string();
  o = {};
  o.opset = 9;
  s = export_onnx(*model, file, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("opset 9"), std::string::npos) << s.to_string();
  s = export_onnx(*load("llama_rope_dynamic-f32"), file, {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("dynamic"), std::string::npos) << s.to_string();
}

TEST(OnnxExporter, OptimizerFoldsWeightTransposesAndTheUnoptimizedFileGivesTheSameLogits) {
  auto model = load("qwen2-f32");
  const fs::path dir = scratch("optimize");
  OnnxExportOptions o;
  o.external_data_threshold = -1;  // everything inline: no .data file
  OnnxExportReport opt, raw;
  ASSERT_TRUE(export_onnx(*model, (dir / "opt.onnx").string(), o, &opt).ok());
  o.optimize = false;
  ASSERT_TRUE(export_onnx(*model, (dir / "raw.onnx").string(), o, &raw).ok());
  EXPECT_FALSE(fs::exists(dir / "opt.onnx.data"));
  EXPECT_EQ(opt.folded, opt.lowered.at("linear"));  // one weight Transpose per linear
  EXPECT_LT(opt.nodes, raw.nodes);
  EXPECT_EQ(raw.optimizer_disabled, "--no-optimize");
  const std::vector<int64_t> ids = to64(random_tokens(*model, 7, 3));
  json step = {{"input_ids", row(ids)}, {"attention_mask", row(std::vector<int64_t>(7, 1))},
               {"position_ids", row(iota(0, 7))}, {"feed_past", false}};
  const json a = run_ort({{"model", (dir / "opt.onnx").string()}, {"op", "steps"}, {"steps", {step}}});
  const json b = run_ort({{"model", (dir / "raw.onnx").string()}, {"op", "steps"}, {"steps", {step}}});
  ASSERT_TRUE(a.contains("steps") && b.contains("steps"));
  EXPECT_EQ(a["steps"][0]["logits"], b["steps"][0]["logits"]);
  expect_checker_accepts(dir / "opt.onnx");
}

}  // namespace
}  // namespace loom::exporting
