// Models loaded with a KernelConfig: each built-in kernel and the RMSNorm+MLP
// fusion (all layers, and a pattern selecting one layer) must give the logits
// and greedy tokens of the same checkpoint loaded without kernels; layouts stay
// with their instance; save_pretrained writes the original checkpoint back.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "loom/batching/generate.h"
#include "loom/batching/model_runner.h"
#include "loom/models/model.h"
#include "loom/models/save_pretrained.h"
#include "loom/runtime/kv_cache_contiguous.h"
#include "models/model_run_util.h"

namespace loom {
namespace kernels_parity_test {  // named: the test files of a program build as one unit

namespace fs = std::filesystem;
using models_test::fixtures_dir;
using models_test::greedy_of;
using models_test::logits_of;
using models_test::prompt_of;
const auto fixture = models_test::existing_fixture;
using kernels::ModuleKernelKind;

std::shared_ptr<models::Model> load_with(const std::string& name, const std::string& config_json) {
  models::LoadOptions o;
  auto cfg = kernels::KernelConfig::parse(config_json);
  if (!cfg.ok()) throw Error(cfg.status());
  o.kernel_config = std::move(cfg).value();
  auto m = models::Model::load(fixture(name).string(), o);
  if (!m.ok()) throw Error(m.status());
  return m.value();
}

struct Case {
  std::string label;
  std::string config;
  // Module path → what the plan must have chosen there (so a config that
  // silently matched nothing cannot pass as parity).
  std::vector<std::pair<std::string, ModuleKernelKind>> expect;
  // Ops the kernel graph must record (so parity is not a plain graph compared with itself).
  std::vector<std::string> ops;
};

std::vector<Case> cases() {
  const std::string norm_mlp_all =
      R"([[["RMSNorm", "model.layers.*.post_attention_layernorm"], ["MLP", "model.layers.*.mlp"]], "loom:RMSNormMLP"])";
  const std::string norm_mlp_one =
      R"([[["RMSNorm", "model.layers.1.post_attention_layernorm"], ["MLP", "model.layers.1.mlp"]], "loom:RMSNormMLP"])";
  const std::string add_norm =
      R"([[["Attention", "model.layers.*.self_attn"], ["RMSNorm", "model.layers.*.post_attention_layernorm"]], "loom:AddRMSNorm"])";
  return {
      {"FusedRMSNorm", R"({"RMSNorm": "loom:FusedRMSNorm"})",
       {{"model.norm", ModuleKernelKind::kKernel}, {"model.layers.0.input_layernorm", ModuleKernelKind::kKernel}},
       {"rms_norm"}},
      {"SiLUAndMul", R"({"SiLUAndMul": "loom:SiLUAndMul"})", {{"model.layers.0.mlp.act_fn", ModuleKernelKind::kKernel}},
       {"silu_and_mul"}},
      {"FusedQKV", R"({"Attention": "loom:FusedQKV"})", {{"model.layers.1.self_attn", ModuleKernelKind::kKernel}},
       {"split_columns"}},
      {"RMSNormMLP", R"({"fusions": [)" + norm_mlp_all + "]}",
       {{"model.layers.0.post_attention_layernorm", ModuleKernelKind::kFused},
        {"model.layers.1.mlp", ModuleKernelKind::kFusedAway}},
       {"silu_and_mul"}},
      {"RMSNormMLP_layer1_only", R"({"fusions": [)" + norm_mlp_one + "]}",
       {{"model.layers.1.post_attention_layernorm", ModuleKernelKind::kFused},
        {"model.layers.0.post_attention_layernorm", ModuleKernelKind::kOwnForward},
        {"model.layers.0.mlp", ModuleKernelKind::kOwnForward}},
       {"silu_and_mul", "silu"}},
      {"AddRMSNorm", R"({"fusions": [)" + add_norm + "]}",
       {{"model.layers.0.post_attention_layernorm", ModuleKernelKind::kFused},
        {"model.layers.1.post_attention_layernorm", ModuleKernelKind::kFused},
        {"model.layers.1.self_attn", ModuleKernelKind::kOwnForward}},
       {"add_rms_norm"}},
      // QKV, gate_up + activation and add + RMSNorm together: the three compose.
      {"QKV_GateUp_AddRMSNorm", R"({"Attention": "loom:FusedQKV", "MLP": "loom:FusedGateUpMLP", "fusions": [)" + add_norm + "]}",
       {{"model.layers.0.post_attention_layernorm", ModuleKernelKind::kFused},
        {"model.layers.1.self_attn", ModuleKernelKind::kKernel},
        {"model.layers.1.mlp", ModuleKernelKind::kKernel}},
       {"add_rms_norm", "split_columns", "silu_and_mul"}},
      {"All", R"({"RMSNorm": "loom:FusedRMSNorm", "Attention": "loom:FusedQKV", "SiLUAndMul": "loom:SiLUAndMul", "fusions": [)" +
                  norm_mlp_one + "]}",
       {{"model.layers.1.post_attention_layernorm", ModuleKernelKind::kFused},
        {"model.layers.0.mlp.act_fn", ModuleKernelKind::kKernel},
        {"model.layers.1.mlp.act_fn", ModuleKernelKind::kInsideReplaced}},
       {"silu_and_mul", "split_columns"}},
  };
}

class KernelsParity : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(KernelsParity, LogitsAndGreedyTokensMatchTheModelWithoutKernels) {
  const std::string name = std::get<0>(GetParam());
  const Case c = cases()[static_cast<size_t>(std::get<1>(GetParam()))];
  const std::vector<int32_t> prompt = prompt_of(name);
  auto plain = models::Model::load(fixture(name).string()).value();
  auto fused = load_with(name, c.config);
  ASSERT_NE(fused->kernel_plan(), nullptr);
  for (const auto& [path, kind] : c.expect) {
    const kernels::ModuleKernel* mk = fused->kernel_plan()->find(path);
    ASSERT_NE(mk, nullptr) << path;
    EXPECT_EQ(mk->kind, kind) << c.label << ": " << path << " is " << kernels::module_kernel_kind_name(mk->kind);
  }

  std::set<std::string> recorded;
  for (const graph::Node& n : fused->step_graph()->nodes()) recorded.insert(n.op);
  for (const std::string& op : c.ops) EXPECT_TRUE(recorded.count(op)) << c.label << " records no " << op;
  if (c.label != "FusedRMSNorm")  // loom's rms_norm op already is the fused norm
    EXPECT_NE(fused->step_graph()->to_string(), plain->step_graph()->to_string()) << c.label;

  const std::vector<float> want = logits_of(plain, prompt);
  const std::vector<float> got = logits_of(fused, prompt);
  const models_test::LogitsDiff diff = models_test::expect_logits_close(got, want, name, c.label + " fused vs plain", 1e-5);
  RecordProperty("max_abs_diff", std::to_string(diff.max_abs));
  RecordProperty("nmse", std::to_string(diff.nmse));
  std::printf("[parity] %-12s %-24s max_abs %.3g nmse %.3g\n", name.c_str(), c.label.c_str(), diff.max_abs, diff.nmse);

  EXPECT_EQ(greedy_of(fused, prompt), greedy_of(plain, prompt)) << name << " " << c.label;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KernelsParity,
                         ::testing::Combine(::testing::Values("llama-f32", "qwen2-f32", "llama-bf16", "qwen2-bf16"),
                                            ::testing::Range(0, static_cast<int>(cases().size()))),
                         [](const auto& info) {
                           std::string s = std::get<0>(info.param) + "_" + cases()[static_cast<size_t>(std::get<1>(info.param))].label;
                           for (auto& ch : s) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// Gemma-2's sandwich norms: the residual add sits between post_attention_layernorm
// and pre_feedforward_layernorm, so AddRMSNorm fuses it into the second (weight offset 1).
TEST(KernelsLoad, AddRMSNormBetweenGemma2SandwichNormsEqualsThePlainModel) {
  for (const std::string name : {"gemma2-f32", "gemma2-bf16"}) {
    auto plain = models::Model::load(fixture(name).string()).value();
    auto fused = load_with(name, R"({"fusions": [[[["RMSNorm", "model.layers.*.post_attention_layernorm"],
        ["RMSNorm", "model.layers.*.pre_feedforward_layernorm"]], "loom:AddRMSNorm"]]})");
    EXPECT_EQ(fused->kernel_plan()->find("model.layers.0.pre_feedforward_layernorm")->kind, ModuleKernelKind::kFused);
    EXPECT_EQ(fused->kernel_plan()->find("model.layers.0.post_attention_layernorm")->kind, ModuleKernelKind::kOwnForward);
    int fused_ops = 0;
    for (const graph::Node& n : fused->step_graph()->nodes()) fused_ops += n.op == "add_rms_norm";
    EXPECT_EQ(fused_ops, fused->num_layers()) << name;
    const std::vector<int32_t> prompt = prompt_of(name);
    models_test::expect_logits_close(logits_of(fused, prompt), logits_of(plain, prompt), name, "AddRMSNorm sandwich", 1e-5);
    EXPECT_EQ(greedy_of(fused, prompt), greedy_of(plain, prompt)) << name;
  }
}

// The built-in fusions front ends load a model with by default
// (LoadOptions::builtin_fusions, models/builtin_fusions.h): on every architecture
// the fixtures cover, the fusions that fit are chosen, and the logits and greedy
// tokens equal the unfused graph's within the parity bound (docs/kernels.md).
struct BuiltinCase {
  std::string fixture;
  bool qkv, gate_up, add_norm;
};

class BuiltinFusionsParity : public ::testing::TestWithParam<BuiltinCase> {};

TEST_P(BuiltinFusionsParity, DefaultFusionsEqualTheUnfusedGraph) {
  const BuiltinCase& c = GetParam();
  auto plain = models::Model::load(fixture(c.fixture).string()).value();
  EXPECT_EQ(plain->kernel_plan(), nullptr);  // the library's default stays unfused
  models::LoadOptions o;
  o.builtin_fusions = true;
  auto fused_or = models::Model::load(fixture(c.fixture).string(), o);
  ASSERT_TRUE(fused_or.ok()) << fused_or.status().message();
  auto fused = fused_or.value();
  ASSERT_NE(fused->kernel_plan(), nullptr);
  auto kind_of = [&](const std::string& path) {
    const kernels::ModuleKernel* mk = fused->kernel_plan()->find(path);
    return mk ? mk->kind : ModuleKernelKind::kOwnForward;
  };
  EXPECT_EQ(kind_of("model.layers.0.self_attn") == ModuleKernelKind::kKernel, c.qkv) << c.fixture;
  EXPECT_EQ(kind_of("model.layers.0.mlp") == ModuleKernelKind::kKernel, c.gate_up) << c.fixture;
  EXPECT_EQ(kind_of("model.layers.0.post_attention_layernorm") == ModuleKernelKind::kFused, c.add_norm) << c.fixture;

  const std::vector<int32_t> prompt = prompt_of(c.fixture);
  const models_test::LogitsDiff diff =
      models_test::expect_logits_close(logits_of(fused, prompt), logits_of(plain, prompt), c.fixture, "built-in fusions", 1e-5);
  std::printf("[builtin fusions] %-16s max_abs %.3g nmse %.3g\n", c.fixture.c_str(), diff.max_abs, diff.nmse);
  EXPECT_EQ(greedy_of(fused, prompt), greedy_of(plain, prompt)) << c.fixture;

  // Under tensor parallelism (not in a unit test's single process) and with a
  // user's config they are off; a config of the user's replaces them whole.
  models::LoadOptions own = o;
  own.kernel_config = kernels::KernelConfig::parse(R"({"RMSNorm": "loom:FusedRMSNorm"})").value();
  auto with_own = models::Model::load(fixture(c.fixture).string(), own).value();
  EXPECT_EQ(with_own->kernel_plan()->find("model.layers.0.self_attn")->kind, ModuleKernelKind::kOwnForward);
}

// Merged projections measured slower on quantized weights: those keep the
// checkpoint's modules unless a config asks (docs/performance.md).
TEST(KernelsLoad, QuantizedWeightsLoadWithoutBuiltinFusions) {
  models::LoadOptions o;
  o.builtin_fusions = true;
  o.quantize = quantization_recipe("q8_0").value();
  auto m = models::Model::load(fixture("llama-f32").string(), o).value();
  EXPECT_EQ(m->kernel_plan(), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BuiltinFusionsParity,
                         ::testing::Values(BuiltinCase{"llama-f32", true, true, true},
                                           BuiltinCase{"llama-bf16", true, true, true},
                                           BuiltinCase{"llama_bias-f32", true, true, true},
                                           BuiltinCase{"qwen2-bf16", true, true, true},
                                           BuiltinCase{"phi3-f32", true, true, true},
                                           // gelu MLPs and sandwich norms: only q/k/v merge
                                           BuiltinCase{"gemma2-f32", true, false, false},
                                           // and with Gemma 3's per-head q/k norms after the split
                                           BuiltinCase{"gemma3-f32", true, false, false},
                                           // Olmo2's norms read the sublayer outputs: no add + norm
                                           BuiltinCase{"olmo2-f32", true, true, false},
                                           // Granite's residual multiplier sits between the attention and the add
                                           BuiltinCase{"granite-f32", true, true, false},
                                           BuiltinCase{"smollm3-f32", true, true, true},
                                           // LayerNorm and an ungated MLP
                                           BuiltinCase{"gpt2-f32", true, false, false},
                                           // MoE blocks are no MLP layer; the add + norm still fuses
                                           BuiltinCase{"mixtral-f32", true, false, true},
                                           BuiltinCase{"qwen2_moe-f32", true, false, true}),
                         [](const auto& info) {
                           std::string s = info.param.fixture;
                           for (auto& ch : s) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

TEST(KernelsLoad, LayoutParametersStayWithTheirInstance) {
  auto fused = load_with("llama-f32", R"({"Attention": "loom:FusedQKV", "fusions": [[[["RMSNorm", "model.layers.*.post_attention_layernorm"], ["MLP", "model.layers.*.mlp"]], "loom:RMSNormMLP"]]})");
  EXPECT_TRUE(fused->parameters().count("model.layers.0.self_attn.qkv_proj.weight"));
  EXPECT_TRUE(fused->parameters().count("model.layers.0.post_attention_layernorm.gate_up_proj.weight"));
  EXPECT_FALSE(fused->parameters().count("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_FALSE(fused->parameters().count("model.layers.0.mlp.gate_proj.weight"));

  // Loaded afterwards in the same process, without a config: original names only.
  auto plain = models::Model::load(fixture("llama-f32").string()).value();
  EXPECT_EQ(plain->kernel_plan(), nullptr);
  std::vector<models::ParameterSpec> declared;
  plain->module().collect_parameters(&declared);
  ASSERT_EQ(plain->parameters().size(), declared.size());
  for (const auto& p : declared) EXPECT_TRUE(plain->parameters().count(p.name)) << p.name;
  for (const auto& [n, t] : plain->parameters()) {
    EXPECT_EQ(n.find("qkv_proj"), std::string::npos) << n;
    EXPECT_EQ(n.find("gate_up_proj"), std::string::npos) << n;
  }
  for (const graph::Node& n : plain->step_graph()->nodes()) {
    EXPECT_NE(n.op, "split_columns");
    EXPECT_NE(n.op, "silu_and_mul");
  }
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(KernelsLoad, SavePretrainedOfAKernelModelWritesTheOriginalCheckpoint) {
  for (const std::string name : {"llama-f32", "qwen2-bf16"}) {
    auto fused = load_with(name, R"({"Attention": "loom:FusedQKV", "fusions": [[[["RMSNorm", "model.layers.*.post_attention_layernorm"], ["MLP", "model.layers.*.mlp"]], "loom:RMSNormMLP"]]})");
    const fs::path out = fs::temp_directory_path() / ("loom_kernels_save_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(out);
    ASSERT_TRUE(models::save_pretrained(*fused, out.string()).ok());
    const std::string original = read_bytes(fixture(name) / "model.safetensors");
    ASSERT_FALSE(original.empty());
    EXPECT_TRUE(read_bytes(out / "model.safetensors") == original) << name << ": written checkpoint differs";
    fs::remove_all(out);
  }
}

TEST(KernelsLoad, NoVariantForThisCpuWithoutFallbackIsAnError) {
  kernels::KernelSpec bf16;
  bf16.repo = "loom";
  bf16.name = "Bf16Norm";
  bf16.devices = {"cpu"};
  bf16.layers = {"RMSNorm"};
  bf16.cpu_features = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"};
  const kernels::CpuFeatures avx2 = kernels::CpuFeatures::from_names({"sse4_2", "avx", "avx2", "fma", "f16c"}).value();
  models::LoadOptions o;
  o.extra_kernels = {bf16};
  o.cpu = &avx2;
  o.kernel_config = kernels::KernelConfig::parse(R"({"RMSNorm": "loom:Bf16Norm", "use_fallback": false})").value();
  auto m = models::Model::load(fixture("llama-f32").string(), o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("use_fallback is off"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("\"RMSNorm\""), std::string::npos) << m.status().message();

  // With fallback the norms run their own forward: the same graph as without kernels.
  o.kernel_config.set_use_fallback(true);
  auto fb = models::Model::load(fixture("llama-f32").string(), o);
  ASSERT_TRUE(fb.ok()) << fb.status().message();
  EXPECT_EQ(fb.value()->kernel_plan()->find("model.norm")->kind, ModuleKernelKind::kFallback);
  auto plain = models::Model::load(fixture("llama-f32").string()).value();
  EXPECT_EQ(fb.value()->step_graph()->to_string(), plain->step_graph()->to_string());
}

TEST(KernelsLoad, ASelectedKernelLoomCannotRecordIsAnErrorNamingTheModule) {
  kernels::KernelSpec lin;
  lin.repo = "loom";
  lin.name = "FancyLinear";
  lin.devices = {"cpu"};
  lin.layers = {"Linear"};
  models::LoadOptions o;
  o.extra_kernels = {lin};
  o.kernel_config = kernels::KernelConfig::parse(R"({"Linear": "loom:FancyLinear"})").value();
  auto m = models::Model::load(fixture("llama-f32").string(), o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("FancyLinear"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("no graph recording"), std::string::npos) << m.status().message();
}

}  // namespace kernels_parity_test
}  // namespace loom
