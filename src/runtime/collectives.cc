#include "loom/runtime/collectives.h"

#include <cstdlib>
#include <mutex>

namespace loom::runtime {

namespace {
std::mutex group_mu;
std::shared_ptr<Collectives> group;
}  // namespace

CollectiveStats Collectives::stats() const {
  return {calls_.load(), bytes_.load(), static_cast<double>(nanos_.load()) * 1e-9};
}

void Collectives::reset_stats() {
  calls_ = 0;
  bytes_ = 0;
  nanos_ = 0;
}

void Collectives::count(int64_t bytes, double seconds) {
  calls_ += 1;
  bytes_ += bytes;
  nanos_ += static_cast<int64_t>(seconds * 1e9);
}

Collectives* process_collectives() {
  std::lock_guard<std::mutex> lock(group_mu);
  return group.get();
}

void set_process_collectives(std::shared_ptr<Collectives> g) {
  std::lock_guard<std::mutex> lock(group_mu);
  group = std::move(g);
}

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_SIZE");
}

}  // namespace loom::runtime
