#include "loom/kernels/cpu_capability.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

namespace loom::kernels {
namespace {

TEST(CpuCapability, TiersAreOrderedAndNeedEveryDefiningFeature) {
  EXPECT_EQ(CpuFeatures::from_names({}).value().level(), CpuLevel::kBaseline);
  EXPECT_EQ(CpuFeatures::from_names({"avx2"}).value().level(), CpuLevel::kBaseline);  // no fma
  EXPECT_EQ(CpuFeatures::from_names({"avx2", "fma"}).value().level(), CpuLevel::kAvx2);
  EXPECT_EQ(CpuFeatures::from_names({"avx2", "fma", "avx512f", "avx512bw", "avx512vl"}).value().level(), CpuLevel::kAvx2);
  EXPECT_EQ(CpuFeatures::from_names({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}).value().level(),
            CpuLevel::kAvx512);
  EXPECT_EQ(
      CpuFeatures::from_names({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"}).value().level(),
      CpuLevel::kAvx512Bf16);
  // bf16 without the avx512 base is not the bf16 tier.
  EXPECT_EQ(CpuFeatures::from_names({"avx2", "fma", "avx512_bf16"}).value().level(), CpuLevel::kAvx2);
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
  const CpuFeatures& host = CpuFeatures::host();
  const std::pair<const char*, const char*> pairs[] = {
      {"avx2", "avx2"},         {"fma", "fma"},           {"avx512f", "avx512f"},         {"avx512bw", "avx512bw"},
      {"avx512vl", "avx512vl"}, {"avx512dq", "avx512dq"}, {"avx512_bf16", "avx512_bf16"}, {"avx512_vnni", "avx512_vnni"},
  };
  for (const auto& [ours, linux_name] : pairs)
    EXPECT_EQ(host.has(ours), flags.count(linux_name) != 0) << ours << " — " << host.describe();
}

}  // namespace
}  // namespace loom::kernels
