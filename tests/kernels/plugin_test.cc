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
  EXPECT_FALSE(head->layout.has_value());  // it declares no parameters of its own
  EXPECT_EQ(p->find("model.layers.0.mlp")->kind, ModuleKernelKind::kFusedAway);
}

TEST(Plugin, VersionOneManifestsStillLoad) {
  KernelRegistry reg;
  reg.add_plugin_directory(kPluginDir, true);
  auto sel = select_kernel(reg, KernelRef::parse("acme/legacy:CustomRMSNorm").value(), "RMSNorm", "cpu",
                           CpuFeatures::host(), false);
  ASSERT_TRUE(sel.ok()) << sel.status().to_string();
  ASSERT_TRUE(sel->kernel);
  EXPECT_EQ(sel->kernel->entry_signature, LOOM_CALL_RMS_NORM_F32_V1);
  EXPECT_NE(sel->kernel->entry, nullptr);
  EXPECT_FALSE(sel->kernel->layout);  // ABI 1 has no parameters of its own
  auto all = reg.find(KernelRef::parse("acme/legacy:CustomRMSNormMLP").value());
  ASSERT_TRUE(all.ok()) << all.status().to_string();  // the third V1 entry: read with V1's stride
  EXPECT_EQ((*all)[0]->layers, std::vector<std::string>{"RMSNorm+MLP"});
}

// ABI 2 (examples/kernel_plugin): the parameters a plugin declares become a
// layout of this model instance, with the weight rules that make them.
TEST(Plugin, DeclaredParametersBecomeTheKernelsLayout) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  KernelRegistry reg;
  reg.add_plugin_directory(kPluginDir, true);
  auto p = resolve(R"({"Attention": "example/layout_kernels:MergedQKV", "RMSNorm": "example/layout_kernels:ScaledRMSNorm"})",
                   reg, cpu(kAvx2), r.view);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const ModuleKernel* attn = p->find("model.layers.0.self_attn");
  ASSERT_TRUE(attn && attn->layout);
  const TinyDecoder d;
  const LayoutInstance& li = *attn->layout;
  ASSERT_EQ(li.parameters.size(), 1u);
  EXPECT_EQ(li.parameters[0].name, "model.layers.0.self_attn.qkv_t.weight");
  EXPECT_EQ(li.parameters[0].shape, (Shape{d.hidden, d.q_out + 2 * d.kv_out}));  // concatenated, then transposed
  EXPECT_EQ(li.replaced, (std::vector<std::string>{"model.layers.0.self_attn.q_proj.weight",
                                                   "model.layers.0.self_attn.k_proj.weight",
                                                   "model.layers.0.self_attn.v_proj.weight"}));
  ASSERT_EQ(li.rules.size(), 1u);
  const std::string rule = describe(li.rules[0]);
  EXPECT_NE(rule.find("Concatenate"), std::string::npos) << rule;
  EXPECT_NE(rule.find("Transpose"), std::string::npos) << rule;
  const ModuleKernel* norm = p->find("model.norm");
  ASSERT_TRUE(norm && norm->layout);
  EXPECT_EQ(norm->layout->parameters[0].name, "model.norm.scale");
  EXPECT_EQ(norm->layout->replaced, std::vector<std::string>{"model.norm.weight"});
  ASSERT_EQ(norm->layout->rules.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<WeightRenaming>(norm->layout->rules[0]));
  ExpectedParams model_expected;
  for (const ModuleInfo& m : r.view.modules)
    for (const ParamInfo& prm : m.parameters) model_expected[prm.name].shape = prm.shape;
  auto expected = p->apply_layouts(model_expected);
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  EXPECT_EQ(expected->at("model.layers.0.self_attn.qkv_t.weight").shape, li.parameters[0].shape);
  EXPECT_FALSE(expected->count("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(expected->count("model.norm.scale") && !expected->count("model.norm.weight"));
}

TEST(Plugin, AMisdeclaredParameterIsAnErrorNamingIt) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  KernelRegistry reg;
  reg.add_plugin_directory(kPluginDir, true);
  auto p = resolve(R"({"RMSNorm": ["acme/norms:MisdeclaredRMSNorm", {"version": 2}]})", reg, cpu(kAvx2), r.view);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("parameter 'scale'"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("source module 1 does not exist"), std::string::npos) << p.status().message();
}

TEST(Plugin, ManifestErrorsNameTheFile) {
  KernelRegistry reg;
  reg.add_plugin_directory(kPluginDir, true);
  auto s = select_kernel(reg, KernelRef::parse("acme/future:CustomRMSNorm").value(), "RMSNorm", "cpu",
                         CpuFeatures::host(), true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("libacme_future.so: ABI version 99, loom speaks 1 to 2"), std::string::npos) << s.status().message();
  s = select_kernel(reg, KernelRef::parse("acme/absent:X").value(), "RMSNorm", "cpu", CpuFeatures::host(), true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("'acme/absent' not found in plugin directories [" + kPluginDir + "]"),
            std::string::npos)
      << s.status().message();
}

}  // namespace plugin_test
}  // namespace loom::kernels
