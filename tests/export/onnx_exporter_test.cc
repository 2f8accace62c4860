// export_onnx: the exported file is run by its consumer, ONNX Runtime
// (onnxruntime-node, driven by tests/oracles/run_onnx.js), and compared with
// loom's own run of the same tokens — prefill logits at every position, a decode
// step fed with the present K/V, a left-padded batch of two, and a 16-token
// greedy generation — and Debian's onnx checker accepts the file. The same for
// static files (fixed dims), dynamic files at several batch sizes and lengths,
// --onnx-ops ort files (ONNX Runtime contrib ops) and NTK-dynamic rope below and
// above max_position_embeddings; the skip and disable lists are consulted.
#include "loom/export/onnx_exporter.h"
#include "export/export_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "loom/batching/generate.h"
#include "loom/batching/model_runner.h"
#include "loom/runtime/cpu/matmul.h"

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
// The contrib ops an --onnx-ops ort export must contain: one GroupQueryAttention
// per layer (head_dim a multiple of 8), RotaryEmbedding per q and k (rope other
// than NTK-dynamic), Skip/SimplifiedLayerNormalization for RMSNorm models; and
// none at all in a standard export.
void expect_contrib_ops(const models::Model& model, const OnnxExportOptions& o, const OnnxExportReport& r) {
  if (o.ops != "ort") {
    EXPECT_TRUE(r.contrib_ops.empty());
    return;
  }
  const auto& layers = model.module().settings().layers;
  const int n = static_cast<int>(layers.size());
  auto count = [&](const char* op) { return r.contrib_ops.count(op) ? r.contrib_ops.at(op) : 0; };
  if (layers[0].head_dim % 8 == 0) EXPECT_EQ(count("GroupQueryAttention"), n);
  else EXPECT_EQ(count("GroupQueryAttention"), 0);
  const bool rope = r.lowered.count("rope") > 0, dynamic_rope = model.config().rope_scaling.rope_type == "dynamic";
  // SmolLM3's NoPE layers rotate nothing.
  const int rotating = static_cast<int>(std::count_if(layers.begin(), layers.end(), [](const auto& a) { return a.use_rope; }));
  EXPECT_EQ(count("RotaryEmbedding"), rope && !dynamic_rope ? 2 * rotating : 0);
  // Olmo2's norms read the sublayer outputs, not a residual sum: no skip to fold in.
  if (r.lowered.count("rms_norm") && !model.module().settings().post_norms_only)
    EXPECT_GE(count("SkipSimplifiedLayerNormalization"), n);
  EXPECT_EQ(r.contrib_fallbacks.empty(), layers[0].head_dim % 8 == 0 && !dynamic_rope);
}

void check_parity(const std::string& fixture, const OnnxExportOptions& o, bool check_with_onnx_checker, int na = 9,
                  std::shared_ptr<const models::Model> preloaded = nullptr) {
  SCOPED_TRACE(fixture + " opset " + std::to_string(o.opset) + " ops " + o.ops);
  // The exported graph computes in f32: it is held to loom's exact products.
  cpu::ScopedMatmulPrecision highest(cpu::MatmulPrecision::kHighest);
  auto model = preloaded ? preloaded : load(fixture);
  const fs::path file = scratch(fixture + "_" + o.ops) / "model.onnx";
  OnnxExportReport report;
  const Status s = export_onnx(*model, file.string(), o, &report);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(report.capture.node_fix_rewrites.at("logits_for_every_position"), 1);
  EXPECT_GT(report.lowered.at("attention"), 0);
  EXPECT_TRUE(fs::exists(file.string() + ".data")) << "weights above the threshold go to external data";
  EXPECT_EQ(report.optimizer_disabled.empty(), onnx_disable_optimize().count(model->config().model_type) == 0);
  expect_contrib_ops(*model, o, report);
  // An ort file holds com.microsoft ops, which Debian's onnx checker does not know
  // (it rejects any op outside its schemas): those files are checked by running them only.
  if (check_with_onnx_checker && o.ops != "ort") expect_checker_accepts(file);

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
  std::printf("[ onnx ] %s opset %d %s max |Δlogits|: prefill %.2e decode %.2e batch %.2e/%.2e batch decode %.2e/%.2e\n",
              fixture.c_str(), o.opset, o.ops.c_str(), prefill, decode, batch_a, batch_b, dec_a, dec_b);
}

void check_parity(const std::string& fixture, int opset, bool check_with_onnx_checker, int na = 9,
                  std::shared_ptr<const models::Model> preloaded = nullptr) {
  OnnxExportOptions o;
  o.opset = opset;
  check_parity(fixture, o, check_with_onnx_checker, na, std::move(preloaded));
}

OnnxExportOptions ort_ops() {
  OnnxExportOptions o;
  o.ops = "ort";
  return o;
}

// A prefill of `seqs` as one batch (left-padded to the longest, pads at position
// 1 as Optimum writes them) followed by one decode step, run by `prefill_file`
// then `decode_file` (the same file for a dynamic export), against loom's packed
// run of the same sequences; returns the largest |Δlogits| over every real row.
double batch_prefill_and_decode(std::shared_ptr<const models::Model> model, const fs::path& prefill_file,
                                const fs::path& decode_file, const std::vector<std::vector<int32_t>>& seqs,
                                json* signature = nullptr) {
  auto runner = batching::ModelRunner::create(std::move(model)).value();
  size_t longest = 0;
  for (const auto& q : seqs) longest = std::max(longest, q.size());
  const auto L = static_cast<int64_t>(longest);
  std::vector<int64_t> past;
  std::vector<std::vector<int32_t>> next;
  for (size_t i = 0; i < seqs.size(); ++i) {
    past.push_back(static_cast<int64_t>(seqs[i].size()));
    next.push_back({static_cast<int32_t>(20 + i)});
  }
  runtime::ContiguousKvCache cache(runner->kv_layout(), static_cast<int64_t>(seqs.size()), L + 2);
  const auto want = loom_step(*runner, cache, seqs, std::vector<int64_t>(seqs.size(), 0));
  const auto want_dec = loom_step(*runner, cache, next, past);

  json ids = json::array(), mask = json::array(), pos = json::array(), ids2 = json::array(), mask2 = json::array(),
       pos2 = json::array();
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto n = static_cast<int64_t>(seqs[i].size()), pad = L - n;
    std::vector<int64_t> id(static_cast<size_t>(pad), 0), m(static_cast<size_t>(pad), 0), p(static_cast<size_t>(pad), 1);
    for (int64_t j = 0; j < n; ++j) id.push_back(seqs[i][static_cast<size_t>(j)]), m.push_back(1), p.push_back(j);
    ids.push_back(id);
    mask.push_back(m);
    pos.push_back(p);
    ids2.push_back({next[i][0]});
    m.push_back(1);
    mask2.push_back(m);
    pos2.push_back({n});
  }
  json steps = json::array();
  steps.push_back({{"model", prefill_file.string()}, {"input_ids", ids}, {"attention_mask", mask}, {"position_ids", pos},
                   {"feed_past", false}});
  steps.push_back({{"model", decode_file.string()}, {"input_ids", ids2}, {"attention_mask", mask2}, {"position_ids", pos2},
                   {"feed_past", true}});
  const json ans = run_ort({{"model", prefill_file.string()}, {"op", "steps"}, {"steps", steps}});
  if (!ans.contains("steps")) return INFINITY;
  if (signature) *signature = ans["signature"];
  double d = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    d = std::max(d, max_diff(want[i], ans["steps"][0], static_cast<int64_t>(i), L - past[i]));
    d = std::max(d, max_diff(want_dec[i], ans["steps"][1], static_cast<int64_t>(i), 0));
  }
  return d;
}

TEST(OnnxExporter, LlamaMatchesLoomOnPrefillDecodeAndPaddedBatch) { check_parity("llama-f32", 17, true); }
TEST(OnnxExporter, Qwen2WithBiasMatchesLoom) { check_parity("qwen2-f32", 17, true); }
TEST(OnnxExporter, Qwen3WithQkNormMatchesLoom) { check_parity("qwen3-f32", 17, true); }
TEST(OnnxExporter, MistralSlidingWindowMatchesLoom) { check_parity("mistral_sliding-f32", 17, true, 23); }
TEST(OnnxExporter, Qwen2SlidingWindowMatchesLoom) { check_parity("qwen2_sliding-f32", 17, true, 23); }
TEST(OnnxExporter, Llama3RopeMatchesLoom) { check_parity("llama_rope_llama3-f32", 17, true); }
TEST(OnnxExporter, YarnRopeMatchesLoom) { check_parity("llama_rope_yarn-f32", 17, true); }
// A model loaded with fused kernels (one qkv projection split in three, the
// RMSNorm+MLP fusion's gate_up + silu_and_mul) lowers those ops too.
TEST(OnnxExporter, AModelWithFusedKernelsMatchesLoom) {
  check_parity("qwen2-f32-fused", 17, true, 9, load("qwen2-f32", export_test::fused_kernels()));
  check_parity("llama-f32-builtin-fusions", 17, true, 9, load("llama-f32", export_test::builtin_fusions()));
}

TEST(OnnxExporter, Bf16WeightsExportAsFloatAndMatchLoom) { check_parity("llama-bf16", 17, true); }

// Opset 14 exercises the ReduceMean model fix; 21 and 26 (ORT 1.30's newest) the axes-as-input
// form and newer IR versions, which Debian's onnx 1.12 checker cannot read.
TEST(OnnxExporter, OlderAndNewerOpsetsMatchLoom) {
  check_parity("llama-f32", 14, true);
  for (int opset : {21, 26}) check_parity("qwen3-f32", opset, false);
}

// 16 greedy tokens driven by the file with its own KV cache equal loom's.
void check_greedy(const std::string& fixture, const OnnxExportOptions& o, int prompt_len = 6) {
  SCOPED_TRACE(fixture + " ops " + o.ops);
  auto model = load(fixture);
  const fs::path file = scratch("greedy_" + fixture + "_" + o.ops) / "model.onnx";
  const Status s = export_onnx(*model, file.string(), o);
  ASSERT_TRUE(s.ok()) << s.to_string();
  const std::vector<int32_t> prompt = random_tokens(*model, prompt_len, 7);
  auto runner = batching::ModelRunner::create(model).value();
  batching::GenerateOptions go;
  go.max_new_tokens = 16;
  const batching::GenerateResult want = batching::generate(*runner, prompt, go).value();
  ASSERT_EQ(want.generated_ids.size(), 16u);
  const json ans = run_ort({{"model", file.string()}, {"op", "greedy"}, {"prompt", prompt}, {"new_tokens", 16}});
  ASSERT_TRUE(ans.contains("tokens"));
  EXPECT_EQ(ans["tokens"].get<std::vector<int32_t>>(), want.generated_ids);
}

TEST(OnnxExporter, GreedyGenerationWithItsOwnKvCacheEqualsLoom) {
  for (const char* fixture : {"llama-f32", "qwen3-f32", "mistral_sliding-f32"}) check_greedy(fixture, {});
}

TEST(OnnxExporter, BadOptionsFailNamingTheCause) {
  auto model = load("llama-f32");
  const std::string file = (scratch("bad") / "m.onnx").string();
  OnnxExportOptions o;
  o.ops = "contrib";
  Status s = export_onnx(*model, file, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--onnx-ops"), std::string::npos) << s.to_string();
  o = {};
  o.opset = 9;
  s = export_onnx(*model, file, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("opset 9"), std::string::npos) << s.to_string();
  o = {};
  o.dynamic = false;
  o.batch_size = 0;
  s = export_onnx(*model, file, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--batch-size"), std::string::npos) << s.to_string();
}

// The variants scripts/make-fixtures wrote (fixtures/index.json) with the given dtype.
std::vector<std::string> fixture_variants(const std::string& dtype) {
  const json index = json::parse(std::ifstream(export_test::fixtures_dir() / "index.json"));
  std::vector<std::string> out;
  for (const auto& v : index.at("variants"))
    if (v.at("dtype") == dtype) out.push_back(v.at("name").get<std::string>());
  return out;
}

// Every f32 fixture, with both op sets: exported and matching loom, unless the
// skip list names its architecture — then the export is refused with that reason.
TEST(OnnxExporter, EveryF32FixtureMatchesLoomWithBothOpSetsOrIsOnTheSkipList) {
  const auto variants = fixture_variants("f32");
  ASSERT_GE(variants.size(), 10u);
  for (const std::string& f : variants)
    for (const char* ops : {"standard", "ort"}) {
      auto model = load(f);
      OnnxExportOptions o;
      o.ops = ops;
      if (const std::string why = onnx_export_skip_reason(model->config().model_type, ops); !why.empty()) {
        const Status s = export_onnx(*model, (scratch("skipped") / "m.onnx").string(), o);
        EXPECT_FALSE(s.ok()) << f << " is on the skip list";
        EXPECT_NE(s.message().find(why), std::string::npos) << s.to_string();
        std::printf("[ onnx ] %s (%s): skipped: %s\n", f.c_str(), ops, why.c_str());
        continue;
      }
      if (model->config().rope_scaling.rope_type == "longrope") {  // refused by name, whatever the architecture
        const Status s = export_onnx(*model, (scratch("skipped") / "m.onnx").string(), o);
        EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.to_string();
        EXPECT_NE(s.message().find("longrope"), std::string::npos) << s.to_string();
        continue;
      }
      check_parity(f, o, true, 23, model);  // 23 tokens: past the fixtures' sliding windows (16)
    }
}

// Static files: every dim a number. A prefill file (batch 2, sequence n, past 0)
// and a decode file (batch 2, sequence 1, past n), the second fed with the first's
// present K/V, match loom; the checker accepts both. Standard ops for every f32
// fixture (each architecture), contrib ops for two.
TEST(OnnxExporter, StaticPrefillAndDecodeFilesHaveFixedDimsAndMatchLoom) {
  std::vector<std::pair<std::string, std::string>> cases;
  for (const std::string& f : fixture_variants("f32")) cases.push_back({f, "standard"});
  cases.push_back({"llama-f32", "ort"});
  cases.push_back({"qwen3-f32", "ort"});
  for (const auto& [fixture_name, ops_name] : cases) {
      const char* fixture = fixture_name.c_str();
      const char* ops = ops_name.c_str();
      SCOPED_TRACE(std::string(fixture) + " " + ops);
      auto model = load(fixture);
      if (!onnx_export_skip_reason(model->config().model_type, ops).empty()) continue;  // refused: checked above
      if (model->config().rope_scaling.rope_type == "longrope") continue;                // refused: checked above
      const int n = 7;
      const fs::path dir = scratch(std::string("static_") + fixture + "_" + ops);
      OnnxExportOptions o;
      o.ops = ops;
      o.dynamic = false;
      o.batch_size = 2;
      o.sequence_length = n;
      o.past_length = 0;
      OnnxExportReport report;
      ASSERT_TRUE(export_onnx(*model, (dir / "prefill.onnx").string(), o, &report).ok());
      EXPECT_NE(report.signature.find("static"), std::string::npos);
      o.sequence_length = 1;
      o.past_length = n;
      ASSERT_TRUE(export_onnx(*model, (dir / "decode.onnx").string(), o).ok());
      if (std::string(ops) != "ort") {  // the checker does not know com.microsoft ops (see check_parity)
        expect_checker_accepts(dir / "prefill.onnx");
        expect_checker_accepts(dir / "decode.onnx");
      }
      json sig;
      const double d = batch_prefill_and_decode(model, dir / "prefill.onnx", dir / "decode.onnx",
                                                {random_tokens(*model, n, 1), random_tokens(*model, n - 3, 2)}, &sig);
      EXPECT_LE(d, kTol);
      const auto& layer = model->module().settings().layers[0];
      const int64_t kv = layer.num_kv_heads, hd = layer.head_dim, vocab = model->vocab_size();
      EXPECT_EQ(sig["input_ids"], json({2, n}));
      EXPECT_EQ(sig["attention_mask"], json({2, n}));
      EXPECT_EQ(sig["position_ids"], json({2, n}));
      EXPECT_EQ(sig["past_key_values.0.key"], json({2, kv, 0, hd}));
      EXPECT_EQ(sig["logits"], json({2, n, vocab}));
      EXPECT_EQ(sig["present.0.value"], json({2, kv, n, hd}));
      for (const auto& [name, dims] : sig.items())
        for (const auto& dim : dims) EXPECT_TRUE(dim.is_number()) << name << " has a symbolic dim " << dim;
      std::printf("[ onnx ] static %s %s max |Δlogits| prefill+decode %.2e\n", fixture, ops, d);
    }
}

// GroupQueryAttention refuses a batch > 1 continuing a prompt after a past, so a
// static ort file of that shape keeps plain attention (and says so); a batch-1 one does not.
TEST(OnnxExporter, StaticOrtFileOfAShapeGroupQueryAttentionRefusesUsesPlainAttention) {
  auto model = load("llama-f32");
  OnnxExportOptions o = ort_ops();
  o.dynamic = false;
  o.batch_size = 2;
  o.sequence_length = 3;
  o.past_length = 4;
  OnnxExportReport r;
  ASSERT_TRUE(export_onnx(*model, (scratch("static_chunk") / "m.onnx").string(), o, &r).ok());
  EXPECT_EQ(r.contrib_ops.count("GroupQueryAttention"), 0u);
  ASSERT_FALSE(r.contrib_fallbacks.empty());
  EXPECT_NE(r.contrib_fallbacks[0].find("batch > 1"), std::string::npos) << r.contrib_fallbacks[0];
  EXPECT_GT(r.contrib_ops.at("RotaryEmbedding"), 0);
  o.batch_size = 1;
  OnnxExportReport r1;
  ASSERT_TRUE(export_onnx(*model, (scratch("static_chunk") / "m1.onnx").string(), o, &r1).ok());
  EXPECT_EQ(r1.contrib_ops.at("GroupQueryAttention"), static_cast<int>(model->module().settings().layers.size()));
  // The batch-1 file continues a 4-token prompt (run by a dynamic ort file) with 3 more tokens, as loom does.
  const fs::path dyn = scratch("static_chunk") / "dynamic.onnx";
  ASSERT_TRUE(export_onnx(*model, dyn.string(), ort_ops()).ok());
  const std::vector<int32_t> t = random_tokens(*model, 7, 5);
  const std::vector<int32_t> first(t.begin(), t.begin() + 4), rest(t.begin() + 4, t.end());
  auto runner = batching::ModelRunner::create(model).value();
  runtime::ContiguousKvCache cache(runner->kv_layout(), 1, 8);
  loom_step(*runner, cache, {first}, {0});
  const auto want = loom_step(*runner, cache, {rest}, {4})[0];
  json steps = json::array();
  steps.push_back({{"model", dyn.string()}, {"input_ids", row(to64(first))}, {"attention_mask", row(std::vector<int64_t>(4, 1))},
                   {"position_ids", row(iota(0, 4))}, {"feed_past", false}});
  steps.push_back({{"model", (scratch("static_chunk") / "m1.onnx").string()}, {"input_ids", row(to64(rest))},
                   {"attention_mask", row(std::vector<int64_t>(7, 1))}, {"position_ids", row(iota(4, 3))}, {"feed_past", true}});
  const json ans = run_ort({{"model", dyn.string()}, {"op", "steps"}, {"steps", steps}});
  ASSERT_TRUE(ans.contains("steps"));
  EXPECT_LE(max_diff(want, ans["steps"][1], 0, 0), kTol);
}

// One dynamic file at batch sizes 1–3 and sequence lengths 1–17 (ragged batches
// left-padded), prefill and decode; its dims are Optimum's names.
TEST(OnnxExporter, DynamicFileRunsAtSeveralBatchSizesAndSequenceLengths) {
  for (const char* ops : {"standard", "ort"}) {
    SCOPED_TRACE(ops);
    auto model = load("qwen2-f32");
    const fs::path file = scratch(std::string("dynamic_sizes_") + ops) / "model.onnx";
    OnnxExportOptions o;
    o.ops = ops;
    ASSERT_TRUE(export_onnx(*model, file.string(), o).ok());
    const std::vector<std::vector<int>> shapes = {{1}, {5}, {17}, {3, 3}, {1, 4}, {17, 2, 9}, {6, 6, 6}};
    json sig;
    uint32_t seed = 40;
    for (const auto& lens : shapes) {
      std::vector<std::vector<int32_t>> seqs;
      for (int n : lens) seqs.push_back(random_tokens(*model, n, ++seed));
      const double d = batch_prefill_and_decode(model, file, file, seqs, &sig);
      EXPECT_LE(d, kTol) << "batch " << lens.size() << ", first length " << lens[0];
    }
    EXPECT_EQ(sig["input_ids"], json({"batch_size", "sequence_length"}));
    EXPECT_EQ(sig["past_key_values.0.key"][2], "past_sequence_length");
    EXPECT_EQ(sig["attention_mask"][1], "past_sequence_length + sequence_length");
    EXPECT_EQ(sig["logits"][0], "batch_size");
  }
}

// NTK-dynamic rope (max_position_embeddings 32 in the fixture): frequencies from
// each row's own length, computed in the graph. Below 32 they are the default
// ones; above, rescaled; a batch mixes one row of each, and a greedy run crosses
// 32 while decoding.
TEST(OnnxExporter, DynamicRopeMatchesLoomBelowAndAboveMaxPositionEmbeddings) {
  auto model = load("llama_rope_dynamic-f32");
  ASSERT_EQ(model->config().max_position_embeddings, 32);
  for (const char* ops : {"standard", "ort"}) {
    SCOPED_TRACE(ops);
    const fs::path file = scratch(std::string("rope_dynamic_") + ops) / "model.onnx";
    OnnxExportOptions o;
    o.ops = ops;
    OnnxExportReport report;
    ASSERT_TRUE(export_onnx(*model, file.string(), o, &report).ok());
    if (std::string(ops) == "standard") expect_checker_accepts(file);
    for (const auto& lens : std::vector<std::vector<int>>{{9}, {20, 12}, {31}, {32}, {40}, {45, 20}, {33, 38}}) {
      std::vector<std::vector<int32_t>> seqs;
      for (int n : lens) seqs.push_back(random_tokens(*model, n, static_cast<uint32_t>(n)));
      const double d = batch_prefill_and_decode(model, file, file, seqs);
      EXPECT_LE(d, kTol) << "lengths " << lens[0] << (lens.size() > 1 ? "+" + std::to_string(lens[1]) : "");
      std::printf("[ onnx ] rope dynamic %s lengths %d%s max |Δlogits| %.2e\n", ops, lens[0],
                  lens.size() > 1 ? ("," + std::to_string(lens[1])).c_str() : "", d);
    }
  }
  check_greedy("llama_rope_dynamic-f32", {}, 24);  // positions 24..39: crosses 32 while decoding
  check_greedy("llama_rope_dynamic-f32", ort_ops(), 24);
}

// --onnx-ops ort: GroupQueryAttention, RotaryEmbedding, SkipSimplifiedLayerNormalization
// (checked by check_parity through expect_contrib_ops) give loom's logits and greedy tokens.
TEST(OnnxExporter, OrtContribOpsMatchLoomAndGenerateLoomsGreedyTokens) {
  for (const char* f : {"llama-f32", "qwen2-f32", "qwen3-f32", "phi3-f32", "llama_rope_yarn-f32", "llama-bf16"})
    check_parity(f, ort_ops(), false);
  check_parity("mistral_sliding-f32", ort_ops(), false, 23);
  check_parity("qwen2-f32-fused", ort_ops(), false, 9, load("qwen2-f32", export_test::fused_kernels()));
  check_parity("llama-f32-builtin-fusions", ort_ops(), false, 9, load("llama-f32", export_test::builtin_fusions()));
  for (const char* fixture : {"llama-f32", "qwen3-f32", "mistral_sliding-f32", "phi3-f32"}) check_greedy(fixture, ort_ops());
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
