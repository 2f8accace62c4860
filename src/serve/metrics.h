// /metrics in Prometheus' text format, with vLLM's metric names under a `loom:`
// prefix and a model_name label, so dashboards and routers built for vLLM read
// them unchanged. Request-level histograms and counters are recorded here as
// requests end; engine gauges come from the manager's stats at scrape time.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "loom/structured/constraint.h"
#include "loom/batching/continuous_batching_manager.h"

namespace loom::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // The Prometheus lines of this histogram: _bucket{le=...}, _sum, _count.
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What one finished sequence contributes.
struct FinishedSequence {
  std::string finished_reason;  // "stop" | "length" | "abort" | "error"
  double queue_seconds = -1;    // added → first scheduled
  double ttft_seconds = -1;     // HTTP request received → first token
  std::vector<double> inter_token_seconds;
  double e2e_seconds = -1;      // HTTP request received → final output
};

class Metrics {
 public:
  explicit Metrics(std::string model_name);
  void record(const FinishedSequence& s);
  // HTTP requests by route and status (loom:http_requests_total).
  void record_http(const std::string& route, int status);
  std::string render(const batching::ManagerStats& stats, bool have_stats,
                     const structured::ConstraintRegistry::Stats& constraints = {}) const;

 private:
  std::string model_label_;
  mutable std::mutex mu_;
  Histogram ttft_, itl_, e2e_, queue_;
  std::map<std::string, uint64_t> success_;
  std::map<std::pair<std::string, int>, uint64_t> http_;
};

}  // namespace loom::serve
