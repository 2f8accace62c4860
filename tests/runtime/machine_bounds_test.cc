// The probes `loom bench` divides by: they must measure something (a positive,
// finite rate) and refuse what they cannot measure with an error, not a crash.
#include "loom/runtime/cpu/machine_bounds.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "loom/core/cpu_features.h"
#include "baselines/matmul_baselines.h"

namespace loom::cpu {
namespace {

TEST(MachineBounds, ReadBandwidthIsPositiveForEveryThreadCount) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    const double gbps = measure_read_bandwidth_gbps(pool, size_t{8} << 20, 1);
    EXPECT_TRUE(std::isfinite(gbps)) << threads;
    EXPECT_GT(gbps, 0.0) << threads;
  }
}

TEST(MachineBounds, ReadBandwidthHandlesBuffersSmallerThanOneChunkPerThread) {
  ThreadPool pool(2);
  EXPECT_GT(measure_read_bandwidth_gbps(pool, 100, 1), 0.0);
}

TEST(MachineBounds, ReadBandwidthOverGivenRangesReadsThemAndNothingElse) {
  ThreadPool pool(2);
  std::vector<uint64_t> a(size_t{1} << 20, 1), b(size_t{1} << 18, 2);
  // Ends that are not whole words (and a range of fewer bytes than a word) are left out, not read past.
  const std::vector<ByteRange> ranges = {{a.data(), a.size() * 8}, {reinterpret_cast<const char*>(b.data()) + 3, b.size() * 8 - 5},
                                         {b.data(), 7}};
  const double gbps = measure_read_bandwidth_gbps(pool, ranges, 2);
  EXPECT_TRUE(std::isfinite(gbps));
  EXPECT_GT(gbps, 0.0);
  EXPECT_EQ(measure_read_bandwidth_gbps(pool, std::vector<ByteRange>{}, 2), 0.0);
  EXPECT_EQ(measure_read_bandwidth_gbps(pool, {{nullptr, 4096}, {b.data(), 7}}, 2), 0.0);
}

TEST(MachineBounds, OnednnMatmulRejectsWhatItCannotMeasure) {
  Result<double> f16 = measure_onednn_matmul_gflops(DType::kF16, 8, 8, 8, 1);
  ASSERT_FALSE(f16.ok());
  Result<double> empty = measure_onednn_matmul_gflops(DType::kF32, 0, 8, 8, 1);
  ASSERT_FALSE(empty.ok());
}

TEST(MachineBounds, OnednnMatmulMeasuresBothDtypesWhenBuiltIn) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    Result<double> g = measure_onednn_matmul_gflops(dt, 32, 64, 48, 1);
    if (!g.ok()) {
      // Only a build without oneDNN, or bf16 on a CPU without AVX-512 (oneDNN has
      // no bf16 matmul there), may refuse, and it must say so.
      EXPECT_EQ(g.status().code(), ErrorCode::kUnsupported) << g.status().message();
      EXPECT_TRUE(!baseline::OnednnLinear::available() || (dt == DType::kBF16 && !cpu_features().avx512f))
          << g.status().message();
      continue;
    }
    EXPECT_TRUE(std::isfinite(g.value()));
    EXPECT_GT(g.value(), 0.0);
  }
}

}  // namespace
}  // namespace loom::cpu
