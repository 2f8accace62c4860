// Loads the example plugin (tests/kernels/plugin/) through KernelConfig.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "kernels/kernels_test_util.h"
#include "loom/graph/external_call_abi.h"
#include "loom/kernels/kernel_plan.h"
#include "loom/kernels/kernel_selection.h"

namespace loom::kernels {
namespace plugin_test {  // named: the test files of a program build as one unit

using testing::Recorded;
using testing::TinyDecoder;

const std::string kPluginDir = std::string(LOOM_BINARY_DIR) + "/kernel_plugins";

CpuFeatures cpu(const std::vector<std::string>& names) { return CpuFeatures::from_names(names).value(); }
const std::vector<std::string> kAvx2 = {"avx2", "fma", "f16c"};
const std::vector<std::string> kAvx512 = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq"};
const std::vector<std::string> kBf16 = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"};

Result<KernelPlan> resolve(const std::string& json, KernelRegistry& reg, const CpuFeatures& c, const ModuleView& view) {
  LOOM_ASSIGN_OR_RETURN(KernelConfig cfg, KernelConfig::parse(json));
  return resolve_kernels(cfg, view, reg, ResolveOptions{&c});
}

// Runs first (file order): nothing has loaded the plugin in this process yet.
TEST(Plugin, UntrustedDirectoryNeedsTrustRemoteCodeAndIsNotLoaded) {
  ASSERT_TRUE(std::filesystem::is_directory(kPluginDir + "/acme/norms")) << "build the example plugins first";
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  KernelRegistry reg;
  reg.add_plugin_directory(kPluginDir, /*trusted=*/false);
  auto p = resolve(R"({"RMSNorm": ["acme/norms:CustomRMSNorm", {"version": 2}]})", reg, cpu(kAvx2), r.view);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(p.status().message().find("'acme/norms' is in untrusted plugin directory"), std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("trust_remote_code"), std::string::npos);
  EXPECT_NE(p.status().message().find("kernel config \"RMSNorm\""), std::string::npos) << p.status().message();
  EXPECT_TRUE(reg.loaded_libraries().empty());
  // Not even dlopen-ed (that would have run its code).
  const std::string lib = kPluginDir + "/acme/norms/v2.1.0/libacme_norms_v2_1_0.so";
  ASSERT_TRUE(std::filesystem::exists(lib));
  EXPECT_EQ(dlopen(lib.c_str(), RTLD_NOW | RTLD_NOLOAD), nullptr);
}

TEST(Plugin, TrustRemoteCodeLoadsAndPicksTheHighestCompatibleVersion) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  KernelRegistry reg;
  reg.add_plugin_directory(kPluginDir, /*trusted=*/false);
  const std::string cfg = R"({"RMSNorm": ["acme/norms:CustomRMSNorm", {"version": 2, "trust_remote_code": true}]})";
  auto p = resolve(cfg, reg, cpu(kAvx2), r.view);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const ModuleKernel* m = p->find("model.layers.0.input_layernorm");
  ASSERT_EQ(m->kind, ModuleKernelKind::kKernel);
  EXPECT_EQ(m->kernel->repo, "acme/norms");
  EXPECT_EQ(m->kernel->version.to_string(), "2.1.0");
  EXPECT_EQ(m->kernel->revision, "v2.1.0");  // the avx2 variant
  EXPECT_NE(m->kernel->source.find("libacme_norms_v2_1_0.so"), std::string::npos);
  EXPECT_EQ(reg.loaded_libraries().size(), 4u);  // every library of the repo, once
}

TEST(Plugin, CapabilityTierAndRangeChooseAmongVariants) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  KernelRegistry reg;
  reg.add_plugin_directory(kPluginDir, /*trusted=*/true);  // trusted: no flag needed
  const std::string cfg = R"({"RMSNorm": ["acme/norms:CustomRMSNorm", {"version": 2}]})";
  struct Case {
    std::vector<std::string> cpu;
    const char* revision;
  } cases[] = {{{}, "v2.0.3"}, {kAvx2, "v2.1.0"}, {kAvx512, "v2.1.0"}, {kBf16, "v2.1.0-bf16"}};
  for (const auto& c : cases) {
    const CpuFeatures f = cpu(c.cpu);
    auto p = resolve(cfg, reg, f, r.view);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    const ModuleKernel* m = p->find("model.norm");
    ASSERT_EQ(m->kind, ModuleKernelKind::kKernel) << f.describe();
    EXPECT_EQ(m->kernel->revision, c.revision) << f.describe() << ": " << m->reason;
  }
  // 2.0.3 is capped at avx2; on an avx512 CPU the reason says it was passed over.
  const CpuFeatures f512 = cpu(kAvx512);
  auto p = resolve(cfg, reg, f512, r.view);
  EXPECT_NE(p->find("model.norm")->reason.find("up to avx2"), std::string::npos) << p->find("model.norm")->reason;
}

TEST(Plugin, VersionOneRevisionAndMissingVersion) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  KernelRegistry reg;
  reg.add_plugin_directory(kPluginDir, true);
  auto p = resolve(R"({"RMSNorm": "acme/norms:CustomRMSNorm"})", reg, cpu(kBf16), r.view);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->find("model.norm")->kernel->version.to_string(), "1.4.0");
  p = resolve(R"({"RMSNorm": ["acme/norms:CustomRMSNorm", {"revision": "v2.0.3"}]})", reg, cpu(kAvx2), r.view);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->find("model.norm")->kernel->version.to_string(), "2.0.3");
  p = resolve(R"({"RMSNorm": ["acme/norms:CustomRMSNorm", {"version": 5}]})", reg, cpu(kAvx2), r.view);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("no version 5.x"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("1.4.0"), std::string::npos) << p.status().message();
}

TEST(Plugin, EntryPointComputesRmsNorm) {
  KernelRegistry reg;
  reg.add_plugin_directory(kPluginDir, true);
  auto sel = select_kernel(reg, KernelRef::parse("acme/norms:CustomRMSNorm").value(), "RMSNorm", "cpu",
                           CpuFeatures::host(), false);
  ASSERT_TRUE(sel.ok()) << sel.status().to_string();
  ASSERT_EQ(sel->kernel->entry_signature, LOOM_CALL_RMS_NORM_F32_V1);
  ASSERT_NE(sel->kernel->entry, nullptr);
  using Fn = void (*)(const float*, const float*, float*, int64_t, int64_t, float);
  auto fn = reinterpret_cast<Fn>(sel->kernel->entry);
  const int64_t rows = 3, cols = 19;
  std::vector<float> x(rows * cols), w(cols), y(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) x[i] = std::sin(0.37f * i) * 3.0f;
  for (int64_t i = 0; i < cols; ++i) w[i] = 0.5f + 0.05f * i;
  fn(x.data(), w.data(), y.data(), rows, cols, 1e-5f);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += x[r * cols + c] * x[r * cols + c];
    const double inv = 1.0 / std::sqrt(ss / cols + 1e-5);
    for (int64_t c = 0; c < cols; ++c) EXPECT_NEAR(y[r * cols + c], x[r * cols + c] * inv * w[c], 1e-5) << r << "," << c;
  }
}

TEST(Plugin, FusedPluginKernelThroughAFusionKey) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  KernelRegistry reg;
  reg.add_plugin_directory(kPluginDir, false);
  auto p = resolve(R"({"fusions": [[[["RMSNorm", "model.layers.*.post_attention_layernorm"], ["MLP", "model.layers.*.mlp"]],
                                    ["acme/norms:CustomRMSNormMLP", {"version": 2, "trust_remote_code": true}]]]})",
                   reg, cpu(kAvx2), r.view);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const ModuleKernel* head = p->find("model.layers.0.post_attention_layernorm");
  ASSERT_EQ(head->kind, ModuleKernelKind::kFused);
  EXPECT_EQ(head->kernel->name, "CustomRMSNormMLP");
  EXPECT_FALSE(head->layout.has_value());  // plugins carry no Layout (see plugin_abi.h)
  EXPECT_EQ(p->find("model.layers.0.mlp")->kind, ModuleKernelKind::kFusedAway);
}

TEST(Plugin, ManifestErrorsNameTheFile) {
  KernelRegistry reg;
  reg.add_plugin_directory(kPluginDir, true);
  auto s = select_kernel(reg, KernelRef::parse("acme/future:CustomRMSNorm").value(), "RMSNorm", "cpu",
                         CpuFeatures::host(), true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("libacme_future.so: ABI version 99"), std::string::npos) << s.status().message();
  s = select_kernel(reg, KernelRef::parse("acme/absent:X").value(), "RMSNorm", "cpu", CpuFeatures::host(), true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("'acme/absent' not found in plugin directories [" + kPluginDir + "]"),
            std::string::npos)
      << s.status().message();
}

}  // namespace plugin_test
}  // namespace loom::kernels
