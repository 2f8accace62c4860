#include "loom/kernels/cpu_capability.h"

#include <gtest/gtest.h>

#include "forced_isa_child.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace loom::kernels {
namespace {

TEST(CpuCapability, TiersAreOrderedAndNeedEveryDefiningFeature) {
  EXPECT_EQ(CpuFeatures::from_names({}).value().level(), CpuLevel::kScalar);
  EXPECT_EQ(CpuFeatures::from_names({"avx2"}).value().level(), CpuLevel::kScalar);  // no fma
  EXPECT_EQ(CpuFeatures::from_names({"avx2", "fma"}).value().level(), CpuLevel::kScalar);  // no f16c
  EXPECT_EQ(CpuFeatures::from_names({"avx2", "fma", "f16c"}).value().level(), CpuLevel::kAvx2);
  EXPECT_EQ(CpuFeatures::from_names({"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl"}).value().level(),
            CpuLevel::kAvx2);
  EXPECT_EQ(CpuFeatures::from_names({"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq"}).value().level(),
            CpuLevel::kAvx512);
  EXPECT_EQ(CpuFeatures::from_names({"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"})
                .value()
                .level(),
            CpuLevel::kAvx512Bf16);
  // bf16 without the avx512 base is not the bf16 tier.
  EXPECT_EQ(CpuFeatures::from_names({"avx2", "fma", "f16c", "avx512_bf16"}).value().level(), CpuLevel::kAvx2);
  EXPECT_LT(CpuLevel::kAvx2, CpuLevel::kAvx512);
  EXPECT_LT(CpuLevel::kAvx512, CpuLevel::kAvx512Bf16);
}

TEST(CpuCapability, UnknownFeatureAndLevelAreErrors) {
  auto c = CpuFeatures::from_names({"avx2", "avx1024"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("avx1024"), std::string::npos);
  auto l = parse_cpu_level("avx3");
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("avx3"), std::string::npos);
  EXPECT_EQ(parse_cpu_level("avx512_bf16").value(), CpuLevel::kAvx512Bf16);
  EXPECT_EQ(parse_cpu_level("baseline").value(), CpuLevel::kScalar);
  EXPECT_EQ(parse_cpu_level("scalar").value(), CpuLevel::kScalar);
}

// The kernel's detection against the kernel's own report in /proc/cpuinfo.
TEST(CpuCapability, HostDetectionAgreesWithProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  ASSERT_TRUE(in) << "loom targets Linux: /proc/cpuinfo must exist";
  std::string line;
  std::set<std::string> flags;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream ss(line.substr(line.find(':') + 1));
    for (std::string f; ss >> f;) flags.insert(f);
    break;
  }
  ASSERT_FALSE(flags.empty());
  // The detection (core's), and what the process's tier admits of it.
  const CpuFeatures host = CpuFeatures::host();
  EXPECT_EQ(host.level(), cpu::active_isa());
  const std::pair<const char*, const char*> pairs[] = {
      {"avx2", "avx2"},         {"fma", "fma"},           {"avx512f", "avx512f"},         {"avx512bw", "avx512bw"},
      {"avx512vl", "avx512vl"}, {"avx512dq", "avx512dq"}, {"avx512_bf16", "avx512_bf16"}, {"avx512_vnni", "avx512_vnni"},
      {"f16c", "f16c"},         {"sse4_2", "sse4_2"},     {"avx512cd", "avx512cd"},
  };
  for (const auto& [ours, linux_name] : pairs) {
    const cpu::CpuFeatureInfo* f = cpu::find_cpu_feature(ours);
    ASSERT_NE(f, nullptr) << ours;
    EXPECT_EQ(cpu::cpu_features().*f->present, flags.count(linux_name) != 0) << ours;
    EXPECT_EQ(host.has(ours), flags.count(linux_name) != 0 && f->tier <= host.level()) << ours << " — " << host.describe();
  }
}


TEST(CpuCapability, ForcedIsaFromEnvironmentSetsTheHostTier) {
  for (CpuLevel l : {CpuLevel::kScalar, CpuLevel::kAvx2, CpuLevel::kAvx512, CpuLevel::kAvx512Bf16}) {
    if (!cpu::isa_supported(l)) continue;
    EXPECT_EQ(loom::testing::run_child_with_forced_isa(std::string(cpu::isa_name(l)), "CpuCapabilityChild"), "") << "LOOM_FORCE_ISA=" << cpu::isa_name(l);
  }
}

// Only does something as the child of the test above.
TEST(CpuCapabilityChild, HostFollowsForcedTier) {
  const char* expected_name = std::getenv("LOOM_TEST_EXPECTED_ISA");
  if (!expected_name) GTEST_SKIP() << "run by ForcedIsaFromEnvironmentSetsTheHostTier";
  const CpuLevel expected = cpu::parse_isa(expected_name).value();
  const CpuFeatures host = CpuFeatures::host();
  EXPECT_EQ(host.level(), expected) << host.describe();
  for (const std::string& name : host.names()) EXPECT_LE(level_of_feature(name), expected) << name;
  if (expected >= CpuLevel::kAvx2) EXPECT_TRUE(host.has("avx2"));
  if (expected < CpuLevel::kAvx512) EXPECT_FALSE(host.has("avx512f"));
}

}  // namespace
}  // namespace loom::kernels
