#include "loom/core/cpu_features.h"

#include <gtest/gtest.h>

#include "forced_isa_child.h"
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "loom/runtime/cpu/highway_target.h"
#include "loom/runtime/cpu/matmul.h"
#include "runtime/cpu/qlinear.h"

namespace loom::cpu {
namespace {

// Restores LOOM_FORCE_ISA and the forced path after a test that changes them.
class ForcedIsaGuard {
 public:
  ForcedIsaGuard() {
    const char* env = std::getenv("LOOM_FORCE_ISA");
    had_env_ = env != nullptr;
    if (had_env_) env_ = env;
  }
  ~ForcedIsaGuard() {
    if (had_env_) {
      setenv("LOOM_FORCE_ISA", env_.c_str(), 1);
    } else {
      unsetenv("LOOM_FORCE_ISA");
    }
    (void)reload_forced_isa_from_env();
  }

 private:
  bool had_env_ = false;
  std::string env_;
};

#if defined(__x86_64__) && defined(__GNUC__)
// GCC's own cpuid-based detection is an independent oracle (it does not check
// OS register support, which every Linux with these CPUs enables).
TEST(CpuFeatures, AgreesWithCompilerBuiltinDetection) {
  __builtin_cpu_init();
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(f.avx2, static_cast<bool>(__builtin_cpu_supports("avx2")));
  EXPECT_EQ(f.fma, static_cast<bool>(__builtin_cpu_supports("fma")));
  EXPECT_EQ(f.avx512f, static_cast<bool>(__builtin_cpu_supports("avx512f")));
  EXPECT_EQ(f.avx512bw, static_cast<bool>(__builtin_cpu_supports("avx512bw")));
  EXPECT_EQ(f.avx512dq, static_cast<bool>(__builtin_cpu_supports("avx512dq")));
  EXPECT_EQ(f.avx512vl, static_cast<bool>(__builtin_cpu_supports("avx512vl")));
  EXPECT_EQ(f.avx512_vnni, static_cast<bool>(__builtin_cpu_supports("avx512vnni")));
  EXPECT_EQ(f.avx512_bf16, static_cast<bool>(__builtin_cpu_supports("avx512bf16")));
  // Fast bf16 dot products are claimed for AMD cores with AVX512_BF16 only.
  if (f.fast_bf16_dot) {
    EXPECT_TRUE(f.avx512_bf16);
    EXPECT_TRUE(__builtin_cpu_is("amd"));
  }
  if (f.avx512_bf16 && __builtin_cpu_is("amd") && __builtin_cpu_is("amdfam19h")) EXPECT_TRUE(f.fast_bf16_dot);
  if (__builtin_cpu_is("intel")) EXPECT_FALSE(f.fast_bf16_dot);
}
#endif

TEST(CpuFeatures, PathsAreNestedAndBestIsSupported) {
  EXPECT_TRUE(isa_supported(Isa::kScalar));
  if (isa_supported(Isa::kAvx512Bf16)) EXPECT_TRUE(isa_supported(Isa::kAvx512));
  if (isa_supported(Isa::kAvx512)) EXPECT_TRUE(isa_supported(Isa::kAvx2));
  EXPECT_TRUE(isa_supported(best_isa()));
  EXPECT_FALSE(cpu_features_string().empty());
}

TEST(CpuFeatures, ParsesPathNamesCaseInsensitively) {
  EXPECT_EQ(parse_isa("scalar").value(), Isa::kScalar);
  EXPECT_EQ(parse_isa("AVX2").value(), Isa::kAvx2);
  EXPECT_EQ(parse_isa("avx512").value(), Isa::kAvx512);
  EXPECT_EQ(parse_isa("Avx512_BF16").value(), Isa::kAvx512Bf16);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    EXPECT_EQ(parse_isa(isa_name(isa)).value(), isa) << isa_name(isa);
  }
  Result<Isa> bad = parse_isa("avx1024");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'avx1024'"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("scalar, avx2, avx512, avx512_bf16"), std::string::npos);
}

TEST(CpuFeatures, SetterForcesEverySupportedPathAndRejectsOthers) {
  ForcedIsaGuard guard;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    const Status s = set_forced_isa(isa_name(isa));
    if (isa_supported(isa)) {
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_EQ(active_isa(), isa);
      EXPECT_EQ(isa_name(), std::string(isa_name(isa)));
    } else {
      EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.to_string();
    }
  }
  ASSERT_TRUE(set_forced_isa("scalar").ok());
  const Status bad = set_forced_isa("neon");
  EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(active_isa(), Isa::kScalar) << "a rejected name must not change the path";
  ASSERT_TRUE(set_forced_isa("").ok());
  EXPECT_EQ(active_isa(), best_isa());
}

TEST(CpuFeatures, EnvironmentOverrideAndBadValueFallsBackWithError) {
  ForcedIsaGuard guard;
  setenv("LOOM_FORCE_ISA", "scalar", 1);
  ASSERT_TRUE(reload_forced_isa_from_env().ok());
  EXPECT_EQ(active_isa(), Isa::kScalar);
  EXPECT_EQ(isa_name(), "SCALAR");

  setenv("LOOM_FORCE_ISA", "sse9", 1);
  const Status s = reload_forced_isa_from_env();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("LOOM_FORCE_ISA"), std::string::npos) << s.message();
  EXPECT_EQ(active_isa(), best_isa()) << "an unusable value falls back to the automatic choice";

  unsetenv("LOOM_FORCE_ISA");
  ASSERT_TRUE(reload_forced_isa_from_env().ok());
  EXPECT_EQ(active_isa(), best_isa());
}

TEST(CpuFeatures, ScopedIsaRestoresPreviousPath) {
  ForcedIsaGuard guard;
  ASSERT_TRUE(set_forced_isa("").ok());
  {
    ScopedIsa outer(Isa::kScalar);
    EXPECT_EQ(active_isa(), Isa::kScalar);
    {
      ScopedIsa inner(best_isa());
      EXPECT_EQ(active_isa(), best_isa());
    }
    EXPECT_EQ(active_isa(), Isa::kScalar);
  }
  EXPECT_EQ(active_isa(), best_isa());
}

// The Highway-built kernels (norm, softmax, rope, elementwise, attention) follow
// the forced path too: never a wider target than the path allows.
TEST(CpuFeatures, ForcedPathReachesHighwayKernels) {
  ForcedIsaGuard guard;
  ASSERT_TRUE(set_forced_isa("").ok());
  const std::string unforced = highway_target_name();
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    ScopedIsa scoped(isa);
    const std::string target = highway_target_name();
    SCOPED_TRACE(std::string(isa_name(isa)) + " -> Highway " + target);
    if (isa == Isa::kScalar) EXPECT_EQ(target.find("AVX"), std::string::npos);
    if (isa == Isa::kAvx2) EXPECT_EQ(target.find("AVX3"), std::string::npos);
#if !defined(HWY_COMPILE_ONLY_STATIC)
    // Every path here is compiled as a Highway target, so each is reached exactly.
    if (isa == Isa::kAvx2) EXPECT_EQ(target, "AVX2");
    if (isa == Isa::kAvx512) EXPECT_NE(target.find("AVX3"), std::string::npos);
#endif
  }
  EXPECT_EQ(highway_target_name(), unforced) << "leaving the scope restores Highway's own choice";
}


TEST(CpuFeatures, ForcedIsaFromEnvironmentReachesEveryKernelFamily) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (!isa_supported(isa)) continue;
    const std::string failure = loom::testing::run_child_with_forced_isa(std::string(isa_name(isa)), "CpuFeaturesChild");
    EXPECT_EQ(failure, "") << "LOOM_FORCE_ISA=" << isa_name(isa);
  }
}

// Only does something as the child of the test above.
TEST(CpuFeaturesChild, TierFromEnvironment) {
  const char* expected_name = std::getenv("LOOM_TEST_EXPECTED_ISA");
  if (!expected_name) GTEST_SKIP() << "run by ForcedIsaFromEnvironmentReachesEveryKernelFamily";
  const Isa expected = parse_isa(expected_name).value();
  EXPECT_EQ(active_isa(), expected);
  // Highway-built kernels (runtime's and core's quantizers share Highway's choice).
  const std::string target = highway_target_name();
  switch (expected) {
    case Isa::kScalar:
      EXPECT_TRUE(target == "EMU128" || target == "SCALAR") << target;
      break;
    case Isa::kAvx2: EXPECT_EQ(target, "AVX2"); break;
    case Isa::kAvx512:
    case Isa::kAvx512Bf16: EXPECT_EQ(target.rfind("AVX3", 0), 0u) << target; break;
  }
  // Hand-written quantized kernels.
  const std::string qdot = detail::quantized_kernels_name();
  if (expected == Isa::kScalar) EXPECT_EQ(qdot, "SCALAR");
  if (expected == Isa::kAvx2) EXPECT_EQ(qdot.find("512"), std::string::npos) << qdot;
  if (expected >= Isa::kAvx512 && cpu_features().avx512_vnni) EXPECT_NE(qdot.find("512"), std::string::npos) << qdot;
  // Hand-written matmul kernels: vdpbf16ps only on the tier that has it.
  if (expected == Isa::kAvx512Bf16) EXPECT_TRUE(bf16_dot_products_active());
  if (expected <= Isa::kAvx2) EXPECT_FALSE(bf16_dot_products_active());
}

}  // namespace
}  // namespace loom::cpu
