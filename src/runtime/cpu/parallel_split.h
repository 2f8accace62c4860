// How the element-wise, norm, softmax and RoPE routines share work between threads: a call
// runs on the calling thread unless it is big enough to pay for waking the pool's workers.
#pragma once

#include <cstdint>
#include <utility>

#include "loom/core/thread_pool.h"

namespace loom::cpu {

// Roughly 10 µs of streaming f32 work at one element per cycle: below it, waking a worker
// costs more than it saves (measured in bench/kernels_bench.cc).
inline constexpr int64_t kMinParallelElements = int64_t{1} << 15;

// body(begin, end) over [0, n) in chunks aligned to `grain`; `elements` is the work estimate.
template <class Body>
void split_range(ThreadPool& pool, int64_t n, int64_t elements, int64_t grain, Body&& body) {
  if (n <= 0) return;
  if (pool.num_threads() == 1 || elements < kMinParallelElements || n <= grain) {
    body(int64_t{0}, n);
    return;
  }
  pool.parallel_for(n, [&](int64_t b, int64_t e, int) { body(b, e); }, grain);
}

// body(row, col_begin, col_end) over rows × [0, n): split by rows when there are enough of them
// for every thread, else by column ranges of `grain` within each row (a decode step's single
// row of 11008 MLP activations is still worth two threads). `cost` is the work of one element
// in units of a streaming add.
template <class Body>
void split_rows(ThreadPool& pool, int64_t rows, int64_t n, int64_t cost, int64_t grain, Body&& body) {
  if (rows <= 0 || n <= 0) return;
  const int64_t elements = rows * n * cost;
  if (pool.num_threads() == 1 || elements < kMinParallelElements) {
    for (int64_t r = 0; r < rows; ++r) body(r, int64_t{0}, n);
    return;
  }
  if (rows >= pool.num_threads()) {
    pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) body(r, int64_t{0}, n);
    });
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) { body(r, b, e); }, grain);
}

}  // namespace loom::cpu
