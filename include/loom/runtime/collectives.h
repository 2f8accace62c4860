// The process group of tensor parallelism: the ranks that each hold one shard of
// a model and run every step together. Graph ops `all_reduce` and `all_gather`
// run through the group installed here; a process without one is a group of one,
// where both ops are identity. The only implementation is MPI's
// (runtime/mpi/, Debian's OpenMPI): nothing home-made stands in for it.
//
// Every wait inside a step is bounded by the group's timeout: a rank that stops
// answering ends the job with an error that names the ranks waited for, instead
// of a hang. Waiting for the next step plan (an idle server) is not bounded.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/status.h"

namespace loom::runtime {

// Bytes moved and time spent in collectives since the group was opened (or reset).
struct CollectiveStats {
  int64_t calls = 0;
  int64_t bytes = 0;     // payload this rank contributed
  double seconds = 0.0;  // wall time inside collectives (includes waiting for slower ranks)
};

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sums `n` floats over the group, in place on every rank.
  virtual Status all_reduce_sum(float* data, int64_t n) = 0;
  // Every rank contributes `n` floats; `out` receives size() * n, rank-major.
  virtual Status all_gather(const float* in, int64_t n, float* out) = 0;
  // Rank `root`'s bytes to everyone (sizes may differ: the root's size is sent
  // first). `bounded`: the wait is bounded by the timeout; unbounded waits
  // still poll, so the process stays responsive to being killed.
  virtual Status broadcast(std::vector<uint8_t>* bytes, int root, bool bounded) = 0;
  // Ends every rank of the job at once (MPI_Abort): after an error on one rank
  // the others would otherwise wait in their next collective.
  [[noreturn]] virtual void abort(int exit_code) = 0;
  // Bounds every later in-step wait (ContinuousBatchingConfig.cpu_group_timeout).
  virtual void set_timeout(double seconds) = 0;
  // What a wait past the timeout (or a failed MPI call) does: end the job at
  // once (the default: a command with nothing to report but the error), or
  // return the error and mark the group broken, so that a server can fail its
  // requests and answer 503 before it ends the job itself.
  virtual void set_abort_on_fault(bool abort) = 0;
  // Ok, or the first fault (naming the rank waited for); once broken, every
  // collective returns that error at once.
  virtual Status health() const = 0;

  CollectiveStats stats() const;
  void reset_stats();

 protected:
  void count(int64_t bytes, double seconds);

 private:
  std::atomic<int64_t> calls_{0}, bytes_{0}, nanos_{0};
};

// The group graph ops use in this process; nullptr: a single process.
Collectives* process_collectives();
void set_process_collectives(std::shared_ptr<Collectives> group);

// True when this process was started by an MPI launcher (mpirun sets
// OMPI_COMM_WORLD_SIZE, PMI/PMIx launchers PMIX_RANK or PMI_SIZE).
bool launched_by_mpi();
// Initialises MPI and returns the world as a group whose in-step waits end after
// `timeout_seconds` (> 0). Unsupported in a build without MPI.
Result<std::shared_ptr<Collectives>> open_mpi_world(double timeout_seconds);

}  // namespace loom::runtime
