// A plugin kernel (tests/kernels/plugin: a C shared library loaded through
// KernelConfig from a trusted directory) replacing RMSNorm and SiLUAndMul in a
// real model: the graph calls the plugin's code through external_call, and the
// logits and greedy tokens equal those of the model without kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/batching/generate.h"
#include "loom/batching/model_runner.h"
#include "loom/graph/external_call_abi.h"
#include "loom/models/model.h"
#include "loom/runtime/kv_cache_contiguous.h"
#include "models/model_run_util.h"

namespace loom {
namespace {

using models_test::greedy_of;
using models_test::logits_of;
using models_test::prompt_of;

const std::string kPluginDir = std::string(LOOM_BINARY_DIR) + "/kernel_plugins";

Result<std::shared_ptr<models::Model>> load_with_plugins(const std::string& name, const std::string& config,
                                                         bool trusted) {
  models::LoadOptions o;
  LOOM_ASSIGN_OR_RETURN(o.kernel_config, kernels::KernelConfig::parse(config));
  (trusted ? o.trusted_plugin_dirs : o.plugin_dirs).push_back(kPluginDir);
  return models::Model::load(models_test::fixture(name).string(), o);
}

constexpr const char* kConfig =
    R"({"RMSNorm": ["acme/norms:CustomRMSNorm", {"version": 2}], "SiLUAndMul": ["acme/norms:CustomSiLUAndMul", {"version": 2}]})";

class PluginKernel : public ::testing::TestWithParam<std::string> {};

TEST_P(PluginKernel, ModelCallsThePluginAndMatchesTheModelWithoutKernels) {
  const std::string name = GetParam();
  const std::vector<int32_t> prompt = prompt_of(name);
  auto plain = models::Model::load(models_test::fixture(name).string()).value();
  auto with_plugin = load_with_plugins(name, kConfig, /*trusted=*/true);
  ASSERT_TRUE(with_plugin.ok()) << with_plugin.status().message();
  auto model = with_plugin.value();

  int norms = 0, acts = 0;
  for (const graph::Node& n : model->step_graph()->nodes()) {
    if (n.op != "external_call") continue;
    EXPECT_NE(n.attr_str("callee").find("acme/norms:"), std::string::npos) << n.attr_str("callee");
    (n.attr_str("signature") == LOOM_CALL_RMS_NORM_F32_V1 ? norms : acts)++;
  }
  const int layers = model->num_layers();
  EXPECT_EQ(norms, 2 * layers + 1) << "input/post-attention norms of every layer and the final norm";
  EXPECT_EQ(acts, layers);

  const std::vector<float> want = logits_of(plain, prompt);
  const std::vector<float> got = logits_of(model, prompt);
  // The plugin sums in double: another implementation, held to the tolerance
  // loom meets against PyTorch (1e-4), not the 1e-5 of loom's own fused
  // kernels, which share loom's float summation order.
  models_test::expect_logits_close(got, want, name, "plugin vs plain", 1e-4);
  EXPECT_EQ(greedy_of(model, prompt), greedy_of(plain, prompt)) << name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PluginKernel, ::testing::Values("llama-f32", "llama-bf16", "qwen2-f32"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) if (c == '-') c = '_';
                           return s;
                         });

TEST(PluginKernelTrust, AnUntrustedDirectoryNeedsTrustRemoteCode) {
  auto untrusted = load_with_plugins("llama-f32", kConfig, /*trusted=*/false);
  ASSERT_FALSE(untrusted.ok());
  EXPECT_NE(untrusted.status().message().find("trust_remote_code"), std::string::npos) << untrusted.status().message();
  auto opted_in = load_with_plugins(
      "llama-f32", R"({"RMSNorm": ["acme/norms:CustomRMSNorm", {"version": 2, "trust_remote_code": true}]})", false);
  ASSERT_TRUE(opted_in.ok()) << opted_in.status().message();
}

}  // namespace
}  // namespace loom
