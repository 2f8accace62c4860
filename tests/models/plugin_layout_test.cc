// A plugin owning its parameters (plugin ABI 2; examples/kernel_plugin): its
// MergedQKV keeps q/k/v as one weight in its own transposed layout, made at
// load from the checkpoint, and its ScaledRMSNorm reads its weight under its
// own name. On the bundled model and a fixture, the graph calls the plugin over
// those parameters and the greedy tokens equal the built-in kernels' path.
#include <gtest/gtest.h>

#include "loom/graph/external_call_abi.h"
#include "loom/models/model.h"
#include "models/model_run_util.h"

namespace loom {
namespace {

using models_test::greedy_of;
using models_test::logits_of;

const std::string kPlugins = std::string(LOOM_BINARY_DIR) + "/kernel_plugins";
const std::string kBundled = std::string(LOOM_SOURCE_DIR) + "/models/loom-kjv-tiny";

std::shared_ptr<models::Model> load(const std::string& dir, const std::string& config) {
  models::LoadOptions o;
  o.kernel_config = kernels::KernelConfig::parse(config).value();
  o.trusted_plugin_dirs.push_back(kPlugins);
  Result<std::shared_ptr<models::Model>> m = models::Model::load(dir, o);
  if (!m.ok()) ADD_FAILURE() << m.status().message();
  return m.ok() ? *m : nullptr;
}

constexpr const char* kPluginConfig =
    R"({"Attention": "example/layout_kernels:MergedQKV", "RMSNorm": "example/layout_kernels:ScaledRMSNorm"})";
constexpr const char* kBuiltinConfig = R"({"Attention": "loom:FusedQKV", "RMSNorm": "loom:FusedRMSNorm"})";

class PluginLayout : public ::testing::TestWithParam<std::string> {};

TEST_P(PluginLayout, OwnParametersInTheirOwnLayoutGiveTheBuiltInTokens) {
  const std::string dir = GetParam() == "bundled" ? kBundled : models_test::existing_fixture(GetParam()).string();
  auto plain = models::Model::load(dir).value();
  auto builtin = load(dir, kBuiltinConfig);
  auto plugin = load(dir, kPluginConfig);
  ASSERT_TRUE(builtin && plugin);

  // The merged weight is the plugin's layout: [in, q + k + v], made from the checkpoint.
  const std::string slot = "model.layers.0.self_attn";
  const auto& params = plugin->parameters();
  ASSERT_TRUE(params.count(slot + ".qkv_t.weight"));
  EXPECT_FALSE(params.count(slot + ".q_proj.weight"));  // replaced
  EXPECT_FALSE(params.count("model.norm.weight"));
  ASSERT_TRUE(params.count("model.norm.scale"));
  const Tensor qkv_t = params.at(slot + ".qkv_t.weight");
  const Tensor q = plain->parameters().at(slot + ".q_proj.weight");
  const Tensor k = plain->parameters().at(slot + ".k_proj.weight");
  const Tensor v = plain->parameters().at(slot + ".v_proj.weight");
  const int64_t in = q.dim(1), out = q.dim(0) + k.dim(0) + v.dim(0);
  ASSERT_EQ(qkv_t.shape(), (Shape{in, out}));
  const std::vector<float> merged = qkv_t.to_f32_vector(), qf = q.to_f32_vector(), kf = k.to_f32_vector(),
                           vf = v.to_f32_vector();
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; i += 7) {
      const float want = o < q.dim(0)              ? qf[o * in + i]
                         : o < q.dim(0) + k.dim(0) ? kf[(o - q.dim(0)) * in + i]
                                                   : vf[(o - q.dim(0) - k.dim(0)) * in + i];
      ASSERT_EQ(merged[i * out + o], want) << "row " << o << " column " << i;
    }

  int linear_t = 0, norms = 0;
  for (const graph::Node& n : plugin->step_graph()->nodes()) {
    if (n.op != "external_call") continue;
    EXPECT_NE(n.attr_str("callee").find("example/layout_kernels:"), std::string::npos);
    (n.attr_str("signature") == LOOM_CALL_LINEAR_T_F32_V1 ? linear_t : norms)++;
  }
  EXPECT_EQ(linear_t, plugin->num_layers());
  EXPECT_EQ(norms, 2 * plugin->num_layers() + 1);

  const std::vector<int32_t> prompt = {1, 5, 9, 14, 3, 27, 8, 2};
  models_test::expect_logits_close(logits_of(plugin, prompt), logits_of(builtin, prompt), GetParam(),
                                   "plugin layout vs built-in", 1e-4);
  EXPECT_EQ(greedy_of(plugin, prompt, 24), greedy_of(builtin, prompt, 24));
}

INSTANTIATE_TEST_SUITE_P(Models, PluginLayout, ::testing::Values("bundled", "llama-f32"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) if (c == '-') c = '_';
                           return s;
                         });

constexpr const char* kAddNormFusion =
    R"([[["Attention", "model.layers.*.self_attn"], ["RMSNorm", "model.layers.*.post_attention_layernorm"]], )";

// The plugin's fused add + RMSNorm (a residual-tail fusion it declares by its
// layers and calling convention) next to its MergedQKV on the attention before
// the add, against the built-in AddRMSNorm next to FusedQKV.
TEST_P(PluginLayout, FusedAddRMSNormGivesTheBuiltInTokens) {
  const std::string dir = GetParam() == "bundled" ? kBundled : models_test::existing_fixture(GetParam()).string();
  auto builtin = load(dir, std::string(R"({"Attention": "loom:FusedQKV", "fusions": [)") + kAddNormFusion +
                               R"("loom:AddRMSNorm"]]})");
  auto plugin = load(dir, std::string(R"({"Attention": "example/layout_kernels:MergedQKV", "fusions": [)") +
                              kAddNormFusion + R"("example/layout_kernels:AddScaledRMSNorm"]]})");
  ASSERT_TRUE(builtin && plugin);
  const kernels::ModuleKernel* norm = plugin->kernel_plan()->find("model.layers.0.post_attention_layernorm");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->kind, kernels::ModuleKernelKind::kFused);
  EXPECT_TRUE(norm->kernel->residual_tail);
  EXPECT_EQ(plugin->kernel_plan()->find("model.layers.0.self_attn")->kind, kernels::ModuleKernelKind::kKernel);

  // Its parameter, made from the chain's module 1, lives under the norm it runs at.
  const auto& params = plugin->parameters();
  EXPECT_TRUE(params.count("model.layers.0.post_attention_layernorm.scale"));
  EXPECT_FALSE(params.count("model.layers.0.post_attention_layernorm.weight"));
  EXPECT_TRUE(params.count("model.layers.0.input_layernorm.weight"));  // not fused: its own

  int add_norms = 0, linear_t = 0, adds = 0;
  for (const graph::Node& n : plugin->step_graph()->nodes()) {
    adds += n.op == "add";
    if (n.op != "external_call") continue;
    add_norms += n.attr_str("signature") == LOOM_CALL_ADD_RMS_NORM_F32_V1;
    linear_t += n.attr_str("signature") == LOOM_CALL_LINEAR_T_F32_V1;
  }
  EXPECT_EQ(add_norms, plugin->num_layers());
  EXPECT_EQ(linear_t, plugin->num_layers());
  EXPECT_EQ(adds, plugin->num_layers());  // only the residual add after each MLP is left

  const std::vector<int32_t> prompt = {1, 5, 9, 14, 3, 27, 8, 2};
  models_test::expect_logits_close(logits_of(plugin, prompt), logits_of(builtin, prompt), GetParam(),
                                   "plugin add+norm vs built-in", 1e-4);
  EXPECT_EQ(greedy_of(plugin, prompt, 24), greedy_of(builtin, prompt, 24));
}

TEST(PluginLayoutChecks, AnUntrustedFusedPluginNeedsTrustRemoteCode) {
  models::LoadOptions o;
  o.kernel_config = kernels::KernelConfig::parse(std::string(R"({"fusions": [)") + kAddNormFusion +
                                                 R"("example/layout_kernels:AddScaledRMSNorm"]]})")
                        .value();
  o.plugin_dirs.push_back(kPlugins);
  auto untrusted = models::Model::load(kBundled, o);
  ASSERT_FALSE(untrusted.ok());
  EXPECT_NE(untrusted.status().message().find("trust_remote_code"), std::string::npos) << untrusted.status().message();

  o.kernel_config = kernels::KernelConfig::parse(std::string(R"({"fusions": [)") + kAddNormFusion +
                                                 R"(["example/layout_kernels:AddScaledRMSNorm", {"version": 1, "trust_remote_code": true}]]]})")
                        .value();
  auto trusted = models::Model::load(kBundled, o);
  ASSERT_TRUE(trusted.ok()) << trusted.status().message();
}

TEST(PluginLayoutChecks, AnUntrustedDirectoryNeedsTrustRemoteCode) {
  models::LoadOptions o;
  o.kernel_config = kernels::KernelConfig::parse(kPluginConfig).value();
  o.plugin_dirs.push_back(kPlugins);  // untrusted, and the refs do not opt in
  auto untrusted = models::Model::load(kBundled, o);
  ASSERT_FALSE(untrusted.ok());
  EXPECT_NE(untrusted.status().message().find("trust_remote_code"), std::string::npos) << untrusted.status().message();
}

}  // namespace
}  // namespace loom
