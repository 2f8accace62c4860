// What this machine can do at most, measured the moment a benchmark runs, so
// `loom bench` can say how close loom gets: decode reads every weight once per
// token (bounded by memory read bandwidth), prefill is GEMM work (bounded by
// the best library matmul we can call: bench/baselines, measure_onednn_matmul_gflops).
// Measured rather than looked up because the same model of CPU gives very
// different figures under VMs and load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/status.h"
#include "loom/core/thread_pool.h"

namespace loom::cpu {

// Sustained read bandwidth in GB/s (1e9 bytes/s) with every thread of `pool`
// streaming its own contiguous share of a `bytes`-sized buffer (far larger than
// the last-level cache), best of `repeats` passes after one warm-up pass.
double measure_read_bandwidth_gbps(ThreadPool& pool, size_t bytes = size_t{1} << 30, int repeats = 4);

struct ByteRange {
  const void* data = nullptr;
  size_t bytes = 0;
};
// Read bandwidth in GB/s over memory that is already there (the weights a decode step
// streams, where they are resident): every thread reads its contiguous share of each
// range in turn, without waiting for the others between ranges; best of `passes`.
// Allocates nothing, so measuring it between runs does not raise a process's peak
// RSS. 0 when the ranges hold nothing.
double measure_read_bandwidth_gbps(ThreadPool& pool, const std::vector<ByteRange>& ranges, int passes = 2);

}  // namespace loom::cpu
