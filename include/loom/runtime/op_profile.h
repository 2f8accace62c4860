// Where a forward step's time goes: wall time per op kind and layer-independent scope
// ("linear  model.layers.*.mlp.down_proj"), summed over every node every Executor runs while
// profiling is on, split by step size (rows of the node's first output). Off by default; then
// an Executor pays one relaxed atomic load per node. `loom bench --profile` and the batching
// benchmark (LOOM_BENCH_PROFILE=1) print it.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace loom::runtime {

class OpProfile {
 public:
  struct Entry {
    std::string op;
    std::string scope;  // layer indices replaced by '*'
    std::string rows;   // "1", "2-64", "65-256" or ">256": the step size class
    int64_t calls = 0;
    double seconds = 0;
  };

  // The profile every Executor reports to.
  static OpProfile& global();

  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  void add(std::string_view op, std::string_view scope, int64_t rows, double seconds);
  // Most time first.
  std::vector<Entry> entries() const;
  double total_seconds() const;
  void reset();

  // A markdown table of the top `max_rows` entries with each one's share of the total; the
  // rest summed in one line.
  std::string table(size_t max_rows = 25) const;

  // "model.layers.12.mlp" -> "model.layers.*.mlp".
  static std::string generic_scope(std::string_view scope);
  static std::string rows_class(int64_t rows);

 private:
  std::atomic<bool> enabled_{false};
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace loom::runtime
