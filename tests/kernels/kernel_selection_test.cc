#include "loom/kernels/kernel_selection.h"

#include <gtest/gtest.h>

namespace loom::kernels {
namespace {

KernelSpec spec(const std::string& version, std::vector<std::string> features, std::optional<CpuLevel> max = {},
                std::vector<std::string> devices = {"cpu"}, std::string revision = "") {
  KernelSpec s;
  s.repo = "test/sel";
  s.name = "Norm";
  s.version = KernelVersion::parse(version).value();
  s.cpu_features = std::move(features);
  s.max_cpu_level = max;
  s.devices = std::move(devices);
  s.layers = {"RMSNorm"};
  s.revision = std::move(revision);
  return s;
}

const std::vector<std::string> kAvx2 = {"avx2", "fma", "f16c"};
const std::vector<std::string> kBf16 = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"};

class Selection : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(reg.add_builtin(spec("1.2.0", {})).ok());
    ASSERT_TRUE(reg.add_builtin(spec("1.10.0", {})).ok());  // numeric, not lexical, ordering
    ASSERT_TRUE(reg.add_builtin(spec("2.0.0", {}, CpuLevel::kAvx2, {"cpu"}, "old-two")).ok());
    ASSERT_TRUE(reg.add_builtin(spec("2.3.1", kAvx2)).ok());
    ASSERT_TRUE(reg.add_builtin(spec("2.3.1", kBf16)).ok());
    ASSERT_TRUE(reg.add_builtin(spec("3.0.0", {}, {}, {"cuda"})).ok());
  }
  KernelSelection pick(int version, const std::vector<std::string>& cpu, bool fallback = true) {
    KernelRef r = KernelRef::parse("test/sel:Norm").value();
    r.version = version;
    auto s = select_kernel(reg, r, "RMSNorm", "cpu", CpuFeatures::from_names(cpu).value(), fallback);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? *s : KernelSelection{};
  }
  KernelRegistry reg;
};

TEST_F(Selection, HighestMinorOfTheRequestedMajor) {
  auto s = pick(1, {});
  ASSERT_TRUE(s.kernel);
  EXPECT_EQ(s.kernel->version.to_string(), "1.10.0");
}

TEST_F(Selection, CapabilityRangesPickTheMostSpecialisedRunnableVariant) {
  auto base = pick(2, {});
  ASSERT_TRUE(base.kernel);
  EXPECT_EQ(base.kernel->version.to_string(), "2.0.0");  // 2.3.1 needs avx2
  EXPECT_NE(base.reason.find("needs CPU feature avx2"), std::string::npos) << base.reason;

  auto avx2 = pick(2, kAvx2);
  ASSERT_TRUE(avx2.kernel);
  EXPECT_EQ(avx2.kernel->version.to_string(), "2.3.1");
  EXPECT_EQ(avx2.kernel->min_cpu_level(), CpuLevel::kAvx2);

  auto bf16 = pick(2, kBf16);
  ASSERT_TRUE(bf16.kernel);
  EXPECT_EQ(bf16.kernel->version.to_string(), "2.3.1");
  EXPECT_EQ(bf16.kernel->min_cpu_level(), CpuLevel::kAvx512Bf16);
  // 2.0.0 is capped at avx2: passed over on the bf16 CPU, and said so.
  EXPECT_NE(bf16.reason.find("up to avx2"), std::string::npos) << bf16.reason;
}

TEST_F(Selection, NoRunnableVariantFallsBackOrFails) {
  auto s = pick(3, kBf16, /*fallback=*/true);
  EXPECT_FALSE(s.kernel);
  EXPECT_NE(s.reason.find("runs on [cuda], not cpu"), std::string::npos) << s.reason;
  EXPECT_NE(s.reason.find("falling back"), std::string::npos) << s.reason;

  KernelRef r = KernelRef::parse("test/sel:Norm").value();
  r.version = 3;
  auto e = select_kernel(reg, r, "RMSNorm", "cpu", CpuFeatures::host(), /*use_fallback=*/false);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(e.status().message().find("use_fallback is off"), std::string::npos) << e.status().message();
}

TEST_F(Selection, MissingVersionIsAnErrorEvenWithFallback) {
  KernelRef r = KernelRef::parse("test/sel:Norm").value();
  r.version = 4;
  auto e = select_kernel(reg, r, "RMSNorm", "cpu", CpuFeatures::host(), true);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("no version 4.x"), std::string::npos) << e.status().message();
  EXPECT_NE(e.status().message().find("2.3.1"), std::string::npos) << e.status().message();
}

TEST_F(Selection, RevisionMatchesExactly) {
  KernelRef r = KernelRef::parse("test/sel:Norm").value();
  r.revision = "old-two";
  auto s = select_kernel(reg, r, "RMSNorm", "cpu", CpuFeatures::from_names(kAvx2).value(), true);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_TRUE(s->kernel);
  EXPECT_EQ(s->kernel->version.to_string(), "2.0.0");
  r.revision = "old";
  EXPECT_FALSE(select_kernel(reg, r, "RMSNorm", "cpu", CpuFeatures::host(), true).ok());
}

TEST_F(Selection, WrongLayerUnknownNameUnknownRepo) {
  KernelRef r = KernelRef::parse("test/sel:Norm").value();
  auto e = select_kernel(reg, r, "Attention", "cpu", CpuFeatures::host(), true);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("provides [RMSNorm], not Attention"), std::string::npos) << e.status().message();

  e = select_kernel(reg, KernelRef::parse("test/sel:Nrom").value(), "RMSNorm", "cpu", CpuFeatures::host(), true);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(e.status().message().find("has no kernel 'Nrom' (it has: Norm)"), std::string::npos) << e.status().message();

  e = select_kernel(reg, KernelRef::parse("acme/nowhere:X").value(), "RMSNorm", "cpu", CpuFeatures::host(), true);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("'acme/nowhere' not found"), std::string::npos) << e.status().message();
}

TEST(BuiltinKernels, DeclareWhatTheyProvide) {
  KernelRegistry reg;
  const std::pair<const char*, const char*> expected[] = {{"FusedRMSNorm", "RMSNorm"},
                                                          {"SiLUAndMul", "SiLUAndMul"},
                                                          {"FusedQKV", "Attention"},
                                                          {"RMSNormMLP", "RMSNorm+MLP"}};
  for (const auto& [name, layer] : expected) {
    auto s = select_kernel(reg, KernelRef::parse(std::string("loom:") + name).value(), layer, "cpu",
                           CpuFeatures::host(), false);
    ASSERT_TRUE(s.ok()) << name << ": " << s.status().to_string();
    EXPECT_EQ(s->kernel->repo, "loom");
    EXPECT_EQ(s->kernel->name, name);
  }
  EXPECT_FALSE(select_kernel(reg, KernelRef::parse("loom:RMSNormMLP").value(), "RMSNorm", "cpu", CpuFeatures::host(), true).ok());
}

TEST(KernelSpecValidation, RejectsUnknownNames) {
  KernelSpec s = spec("1.0.0", {"avx9"});
  Status st = s.validate();
  EXPECT_NE(st.message().find("unknown CPU feature 'avx9'"), std::string::npos) << st.message();
  s = spec("1.0.0", {});
  s.layers = {"RMSNorm+MPL"};
  st = s.validate();
  EXPECT_NE(st.message().find("unknown layer name 'MPL'"), std::string::npos) << st.message();
  s = spec("1.0.0", kBf16, CpuLevel::kAvx2);
  st = s.validate();
  EXPECT_NE(st.message().find("max_cpu_level avx2 is below"), std::string::npos) << st.message();
  EXPECT_FALSE(KernelVersion::parse("2.x").ok());
  EXPECT_FALSE(KernelVersion::parse("0.1.0").ok());
  EXPECT_FALSE(KernelVersion::parse("1.2.3.4").ok());
  EXPECT_EQ(KernelVersion::parse("2.1").value().to_string(), "2.1.0");
}

}  // namespace
}  // namespace loom::kernels
