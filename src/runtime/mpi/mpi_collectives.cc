// The tensor-parallel group over MPI. Every collective is non-blocking and
// polled against a deadline (ContinuousBatchingConfig.cpu_group_timeout): a
// blocking MPI call would wait forever for a rank that is stopped or stuck.
// A rank that dies is usually reported by mpirun itself, which then ends the
// others; the deadline covers what mpirun cannot see.
#include "loom/runtime/collectives.h"

#ifdef LOOM_WITH_MPI
// The C API only: the deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#endif

namespace loom::runtime {

#ifndef LOOM_WITH_MPI

Result<std::shared_ptr<Collectives>> open_mpi_world(double) {
  return unsupported("this loom was built without MPI (install libopenmpi-dev and reconfigure); "
                     "tensor parallelism needs it");
}

#else

namespace {

using Clock = std::chrono::steady_clock;

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

class MpiWorld final : public Collectives {
 public:
  MpiWorld(int rank, int size, double timeout) : rank_(rank), size_(size), timeout_(timeout) {}
  ~MpiWorld() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status all_reduce_sum(float* data, int64_t n) override {
    const auto t0 = Clock::now();
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    LOOM_RETURN_IF_ERROR(finish(rc, &req, "all_reduce of " + std::to_string(n) + " floats", true));
    count(n * 4, seconds_since(t0));
    return Status::Ok();
  }

  Status all_gather(const float* in, int64_t n, float* out) override {
    const auto t0 = Clock::now();
    MPI_Request req;
    int rc = MPI_Iallgather(in, static_cast<int>(n), MPI_FLOAT, out, static_cast<int>(n), MPI_FLOAT, MPI_COMM_WORLD, &req);
    LOOM_RETURN_IF_ERROR(finish(rc, &req, "all_gather of " + std::to_string(n) + " floats", true));
    count(n * 4, seconds_since(t0));
    return Status::Ok();
  }

  Status broadcast(std::vector<uint8_t>* bytes, int root, bool bounded) override {
    int64_t n = static_cast<int64_t>(bytes->size());
    MPI_Request req;
    int rc = MPI_Ibcast(&n, 1, MPI_INT64_T, root, MPI_COMM_WORLD, &req);
    LOOM_RETURN_IF_ERROR(finish(rc, &req, "broadcast of the step plan's size", bounded, root));
    bytes->resize(static_cast<size_t>(n));
    rc = MPI_Ibcast(bytes->data(), static_cast<int>(n), MPI_BYTE, root, MPI_COMM_WORLD, &req);
    return finish(rc, &req, "broadcast of a " + std::to_string(n) + "-byte step plan", true, root);
  }

  void set_timeout(double seconds) override {
    if (seconds > 0) timeout_ = seconds;
  }

  void set_abort_on_fault(bool abort) override { abort_on_fault_ = abort; }

  Status health() const override {
    std::lock_guard<std::mutex> lk(fault_mu_);
    return fault_;
  }

  [[noreturn]] void abort(int exit_code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }

 private:
  static double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // Who this rank was waiting for: the root of a broadcast, else every other rank.
  std::string peers(int root) const {
    if (root >= 0 && root != rank_) return "rank " + std::to_string(root);
    std::string s;
    int count = 0;
    for (int r = 0; r < size_; ++r)
      if (r != rank_) s += (count++ ? ", " : "") + std::to_string(r);
    return (count == 1 ? "rank " : "one of ranks ") + s;
  }

  // A fault ends the job, or breaks the group: the pending MPI request can
  // never complete, so no later collective may run.
  Status fault(const std::string& message) {
    std::fprintf(stderr, "loom: error: %s%s\n", message.c_str(), abort_on_fault_ ? "; ending the job" : "");
    if (abort_on_fault_) abort(3);
    Status why(ErrorCode::kFailedPrecondition, message);
    std::lock_guard<std::mutex> lk(fault_mu_);
    if (fault_.ok()) fault_ = why;
    return fault_;
  }

  Status finish(int rc, MPI_Request* req, const std::string& what, bool bounded, int root = -1) {
    if (Status h = health(); !h.ok()) return h;
    const std::string who = "tensor-parallel rank " + std::to_string(rank_) + ": ";
    if (rc != MPI_SUCCESS) return fault(who + what + ": " + mpi_error(rc));
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration<double>(timeout_.load());
    const auto spin_until = start + std::chrono::milliseconds(5);
    for (;;) {
      int done = 0;
      rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return fault(who + what + " failed (" + peers(root) + "): " + mpi_error(rc));
      if (done) return Status::Ok();
      if (bounded && Clock::now() > deadline) {
        // The other ranks are as stuck as this one: no collective may follow.
        char limit[32];
        std::snprintf(limit, sizeof(limit), "%g", timeout_.load());
        return fault(who + what + " got no answer from " + peers(root) + " within " + limit + " s (cpu_group_timeout)");
      }
      // A step's collectives complete in microseconds to milliseconds: keep
      // testing (MPI progresses on each test) but yield the core, since ranks
      // may share cores; past that, an idle wait sleeps between tests.
      const auto now = Clock::now();
      if (now < spin_until) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(now - start > std::chrono::seconds(1) ? 1000 : 50));
    }
  }

  int rank_, size_;
  std::atomic<double> timeout_;
  std::atomic<bool> abort_on_fault_{true};
  mutable std::mutex fault_mu_;
  Status fault_;
};

}  // namespace

Result<std::shared_ptr<Collectives>> open_mpi_world(double timeout_seconds) {
  if (!(timeout_seconds > 0)) return invalid_argument("the tensor-parallel group timeout must be > 0 seconds");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    // One thread at a time calls MPI: the one running steps, then the one ending them.
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return internal_error("MPI_Init_thread failed: " + mpi_error(rc));
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::shared_ptr<Collectives>(std::make_shared<MpiWorld>(rank, size, timeout_seconds));
}

#endif

}  // namespace loom::runtime
