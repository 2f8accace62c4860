// Kernel layouts on an architecture that converts its checkpoint: Phi3 splits
// the checkpoint's qkv_proj and gate_up_proj, and loom:FusedQKV / loom:RMSNormMLP
// fuse them again in their own layouts. The layouts' rules are a second stage on
// the architecture's plan (weights/conversion_plan.h): the model loads, gives
// the logits and greedy tokens of the model without kernels, and save_pretrained
// writes the original checkpoint back byte for byte. Layout rules that conflict
// with each other or read what only the checkpoint has are errors naming both
// rules.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "loom/batching/generate.h"
#include "loom/batching/model_runner.h"
#include "loom/models/model.h"
#include "loom/models/save_pretrained.h"
#include "loom/runtime/kv_cache_contiguous.h"
#include "models/model_run_util.h"

namespace loom {
namespace layout_composition_test {  // named: the test files of a program build as one unit

namespace fs = std::filesystem;
using kernels::ModuleKernelKind;
using models_test::fixtures_dir;
using models_test::greedy_of;
using models_test::logits_of;
using models_test::prompt_of;
const auto fixture = models_test::existing_fixture;

Result<std::shared_ptr<models::Model>> try_load(const std::string& name, const std::string& config_json,
                                                std::vector<kernels::KernelSpec> extra = {}) {
  models::LoadOptions o;
  LOOM_ASSIGN_OR_RETURN(o.kernel_config, kernels::KernelConfig::parse(config_json));
  o.extra_kernels = std::move(extra);
  return models::Model::load(fixture(name).string(), o);
}

std::shared_ptr<models::Model> load_with(const std::string& name, const std::string& config_json) {
  auto m = try_load(name, config_json);
  if (!m.ok()) throw Error(m.status());
  return m.value();
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const char* kFusedQkv = R"({"Attention": "loom:FusedQKV"})";
const char* kNormMlp =
    R"({"fusions": [[[["RMSNorm", "model.layers.*.post_attention_layernorm"], ["MLP", "model.layers.*.mlp"]], "loom:RMSNormMLP"]]})";
const char* kBoth =
    R"({"Attention": "loom:FusedQKV", "fusions": [[[["RMSNorm", "model.layers.*.post_attention_layernorm"], ["MLP", "model.layers.*.mlp"]], "loom:RMSNormMLP"]]})";

struct Case {
  std::string label;
  std::string config;
  std::vector<std::string> fused_params;  // per layer, under model.layers.<l>.
  std::vector<std::string> gone_params;   // per layer: the architecture's names the layouts replaced
};

std::vector<Case> cases() {
  return {
      {"FusedQKV", kFusedQkv, {"self_attn.qkv_proj.weight"}, {"self_attn.q_proj.weight", "self_attn.v_proj.weight"}},
      {"RMSNormMLP", kNormMlp, {"post_attention_layernorm.gate_up_proj.weight", "post_attention_layernorm.down_proj.weight"},
       {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}},
      {"Both", kBoth, {"self_attn.qkv_proj.weight", "post_attention_layernorm.gate_up_proj.weight"},
       {"self_attn.k_proj.weight", "mlp.up_proj.weight"}},
  };
}

class LayoutComposition : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(LayoutComposition, Phi3WithLayoutsMatchesPhi3WithoutKernels) {
  const std::string name = std::get<0>(GetParam());
  const Case c = cases()[static_cast<size_t>(std::get<1>(GetParam()))];
  auto plain = models::Model::load(fixture(name).string()).value();
  auto fused = load_with(name, c.config);
  ASSERT_EQ(fused->module().class_name(), "Phi3ForCausalLM");
  ASSERT_NE(fused->weight_plan().second_stage(), nullptr);
  const Checkpoint& ck = fused->checkpoint();
  for (int64_t l = 0; l < fused->config().num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const auto& n : c.fused_params) EXPECT_TRUE(fused->parameters().count(p + n)) << c.label << ": no " << p + n;
    for (const auto& n : c.gone_params) EXPECT_FALSE(fused->parameters().count(p + n)) << c.label << ": still " << p + n;
    // Fused again, the tensors are the checkpoint's own fused ones.
    for (const auto& [mine, theirs] : std::vector<std::pair<std::string, std::string>>{
             {"self_attn.qkv_proj.weight", "self_attn.qkv_proj.weight"},
             {"post_attention_layernorm.gate_up_proj.weight", "mlp.gate_up_proj.weight"},
             {"post_attention_layernorm.down_proj.weight", "mlp.down_proj.weight"}}) {
      auto it = fused->parameters().find(p + mine);
      if (it == fused->parameters().end()) continue;
      const Tensor want = ck.get(p + theirs).value();
      ASSERT_EQ(it->second.shape(), want.shape()) << p + mine;
      EXPECT_EQ(std::memcmp(it->second.data(), want.data(), want.nbytes()), 0) << p + mine;
      // Split by Phi3 and joined again by the layout: a view of the mapping, not a copy.
      EXPECT_EQ(it->second.data(), want.data()) << p + mine;
    }
  }
  EXPECT_NE(fused->step_graph()->to_string(), plain->step_graph()->to_string()) << c.label;

  const std::vector<int32_t> prompt = prompt_of(name);
  const std::vector<float> want = logits_of(plain, prompt);
  const std::vector<float> got = logits_of(fused, prompt);
  const models_test::LogitsDiff diff = models_test::expect_logits_close(got, want, name, c.label + " fused vs plain", 1e-5);
  std::printf("[composition] %-10s %-10s max_abs %.3g nmse %.3g\n", name.c_str(), c.label.c_str(), diff.max_abs,
              diff.nmse);
  EXPECT_EQ(greedy_of(fused, prompt), greedy_of(plain, prompt)) << name << " " << c.label;
}

TEST_P(LayoutComposition, SavePretrainedWritesTheOriginalCheckpoint) {
  const std::string name = std::get<0>(GetParam());
  const Case c = cases()[static_cast<size_t>(std::get<1>(GetParam()))];
  auto fused = load_with(name, c.config);
  const fs::path out = fs::temp_directory_path() / ("loom_compose_save_" + std::to_string(::getpid()) + "_" + name + "_" + c.label);
  fs::remove_all(out);
  const Status s = models::save_pretrained(*fused, out.string());
  ASSERT_TRUE(s.ok()) << s.to_string();
  const std::string original = read_bytes(fixture(name) / "model.safetensors");
  ASSERT_FALSE(original.empty());
  const std::string written = read_bytes(out / "model.safetensors");
  EXPECT_EQ(written.size(), original.size());
  EXPECT_TRUE(written == original) << name << " " << c.label << ": written checkpoint differs";
  // And the written folder loads with the same layouts to the same parameters.
  models::LoadOptions o;
  o.kernel_config = kernels::KernelConfig::parse(c.config).value();
  auto reloaded = models::Model::load(out.string(), o);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status().to_string();
  ASSERT_EQ(reloaded.value()->parameters().size(), fused->parameters().size());
  for (const auto& [n, t] : fused->parameters()) {
    const Tensor& u = reloaded.value()->parameters().at(n);
    ASSERT_EQ(u.nbytes(), t.nbytes()) << n;
    EXPECT_EQ(std::memcmp(u.data(), t.data(), t.nbytes()), 0) << n;
  }
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Phi3, LayoutComposition,
                         ::testing::Combine(::testing::Values("phi3-f32", "phi3-bf16"),
                                            ::testing::Range(0, static_cast<int>(cases().size()))),
                         [](const auto& info) {
                           std::string s = std::get<0>(info.param) + "_" +
                                           cases()[static_cast<size_t>(std::get<1>(info.param))].label;
                           for (auto& ch : s)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// Streaming a composed plan: Phi3 splits qkv_proj and gate_up_proj, the
// layouts join the pieces again; load recognizes the pair as the identity, so
// every parameter is a view into the mapping and nothing is buffered.
TEST(LayoutCompositionLoad, PhiWithBothLayoutsLoadsWithoutCopies) {
  for (const std::string name : {"phi3-f32", "phi3-bf16"}) {
    auto fused = load_with(name, kBoth);
    size_t delivered = 0;
    auto stats = fused->weight_plan().load(fused->checkpoint(), [&](const std::string& n, Tensor t) {
      ++delivered;
      EXPECT_TRUE(fused->parameters().count(n)) << n;
      EXPECT_EQ(t.shape(), fused->parameters().at(n).shape()) << n;
      return Status::Ok();
    });
    ASSERT_TRUE(stats.ok()) << stats.status().to_string();
    EXPECT_EQ(delivered, fused->parameters().size());
    EXPECT_EQ(stats->zero_copy_params, fused->parameters().size()) << name;
    EXPECT_EQ(stats->peak_buffered_bytes, 0u) << name;
    EXPECT_EQ(stats->peak_group_bytes, 0u) << name << ": " << stats->peak_group;
    std::printf("[composition] %s: %zu groups, %zu zero-copy, %zu materialized params, peak group %llu bytes, "
                "peak buffered %llu bytes\n",
                name.c_str(), stats->groups, stats->zero_copy_params, stats->materialized_params,
                static_cast<unsigned long long>(stats->peak_group_bytes),
                static_cast<unsigned long long>(stats->peak_buffered_bytes));
  }
}

// A test kernel for "Attention" whose layout reads what its rule names.
kernels::KernelSpec attention_kernel(const std::string& name, std::function<WeightRule(const std::string& path)> rule,
                                     std::function<std::vector<std::string>(const std::string& path)> replaced,
                                     std::string param_leaf, Shape param_shape) {
  kernels::KernelSpec k;
  k.repo = "loom";
  k.name = name;
  k.devices = {"cpu"};
  k.layers = {"Attention"};
  k.layout = [=](const kernels::LayoutRequest& r) -> Result<kernels::LayoutInstance> {
    const std::string path = r.modules[0]->path;
    kernels::LayoutInstance li;
    li.slot = path;
    li.parameters.push_back({path + "." + param_leaf, param_shape, ""});
    li.replaced = replaced(path);
    li.rules.push_back(rule(path));
    return li;
  };
  return k;
}

std::string layer_of(const std::string& attention_path) {
  return attention_path.substr(0, attention_path.size() - std::string(".self_attn").size());
}

TEST(LayoutCompositionErrors, ALayoutRuleReadingACheckpointNameNamesTheArchitectureRule) {
  const ModelConfig cfg = models::Model::load(fixture("phi3-f32").string()).value()->config();
  const int64_t rows = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * (cfg.hidden_size / cfg.num_attention_heads);
  // Written against Phi3's checkpoint (qkv_proj) instead of its parameters (q/k/v_proj).
  auto k = attention_kernel(
      "QkvTransposed",
      [](const std::string& p) -> WeightRule {
        return WeightConverter{{"^" + p + ".qkv_proj.weight$"}, {"^" + p + ".qkv_t.weight$"}, {Transpose(0, 1)}, false,
                               "QkvTransposed at " + p};
      },
      [](const std::string& p) {
        return std::vector<std::string>{p + ".q_proj.weight", p + ".k_proj.weight", p + ".v_proj.weight"};
      },
      "qkv_t.weight", {cfg.hidden_size, rows});
  auto m = try_load("phi3-f32", R"({"Attention": "loom:QkvTransposed"})", {k});
  ASSERT_FALSE(m.ok());
  const std::string msg = m.status().message();
  EXPECT_NE(msg.find("layout rule #0 WeightConverter 'QkvTransposed at model.layers.0.self_attn'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("checkpoint tensor 'model.layers.0.self_attn.qkv_proj.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("architecture rule #0 WeightConverter 'Phi3 qkv_proj'"), std::string::npos) << msg;
}

TEST(LayoutCompositionErrors, TwoLayoutsReadingOneParameterNameBothRules) {
  const ModelConfig cfg = models::Model::load(fixture("phi3-f32").string()).value()->config();
  // An attention kernel whose layout also takes the MLP's gate_proj, which RMSNormMLP fuses too.
  auto k = attention_kernel(
      "GateGrabber",
      [](const std::string& p) -> WeightRule {
        return WeightConverter{{"^" + layer_of(p) + ".mlp.gate_proj.weight$"}, {"^" + p + ".gate_t.weight$"},
                               {Transpose(0, 1)}, false, "GateGrabber at " + p};
      },
      [](const std::string& p) { return std::vector<std::string>{layer_of(p) + ".mlp.gate_proj.weight"}; },
      "gate_t.weight", {cfg.hidden_size, cfg.intermediate_size});
  auto m = try_load("phi3-f32",
                    R"({"Attention": "loom:GateGrabber", "fusions": [[[["RMSNorm", "model.layers.*.post_attention_layernorm"], ["MLP", "model.layers.*.mlp"]], "loom:RMSNormMLP"]]})",
                    {k});
  ASSERT_FALSE(m.ok());
  const std::string msg = m.status().message();
  EXPECT_NE(msg.find("conflicting rules for parameter 'model.layers.0.mlp.gate_proj.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'GateGrabber at model.layers.0.self_attn'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'loom:RMSNormMLP at model.layers.0.post_attention_layernorm'"), std::string::npos) << msg;
}

}  // namespace layout_composition_test
}  // namespace loom
