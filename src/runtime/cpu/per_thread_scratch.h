// Scratch for each thread index of a parallel region, kept by the calling thread
// and grown by it before the region starts.
//
// A thread_local inside a worker allocates the first time that worker runs the
// kernel, and on a loaded machine that can be long after warm-up: the pool's
// caller runs the chunks of workers that have not started yet, so a worker may
// sit out every warm-up step. Indices belong to one call at a time within a
// region (ThreadPool::parallel_for), so buffers indexed by them serve whichever
// thread runs the index, and a steady-state step allocates nothing.
#pragma once

#include <cstddef>
#include <vector>

namespace loom::cpu::detail {

// One S per thread index [0, threads), owned by the calling thread; grow each
// entry to the region's needs before parallel_for.
template <class S>
std::vector<S>& per_thread_scratch(int threads) {
  thread_local std::vector<S> scratch;
  if (scratch.size() < static_cast<size_t>(threads)) scratch.resize(static_cast<size_t>(threads));
  return scratch;
}

}  // namespace loom::cpu::detail
