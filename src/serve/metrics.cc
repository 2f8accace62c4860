#include "serve/metrics.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace loom::serve {

namespace {

// The shortest form that reads back as the same double ("0.04", not "0.040000000000000001").
std::string number(double v) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

// vLLM's buckets for the same histograms.
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> latency_buckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum{" + labels + "} " + number(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

Metrics::Metrics(std::string model_name)
    : model_label_("model_name=\"" + escape_label(model_name) + "\""),
      ttft_(ttft_buckets()),
      itl_(itl_buckets()),
      e2e_(latency_buckets()),
      queue_(latency_buckets()) {
  for (const char* r : {"stop", "length", "abort", "error"}) success_[r] = 0;
}

void Metrics::record(const FinishedSequence& s) {
  std::lock_guard<std::mutex> lk(mu_);
  ++success_[s.finished_reason];
  if (s.ttft_seconds >= 0) ttft_.observe(s.ttft_seconds);
  for (double d : s.inter_token_seconds) itl_.observe(d);
  if (s.e2e_seconds >= 0) e2e_.observe(s.e2e_seconds);
  if (s.queue_seconds >= 0) queue_.observe(s.queue_seconds);
}

void Metrics::record_http(const std::string& route, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++http_[{route, status}];
}

std::string Metrics::render(const batching::ManagerStats& st, bool have_stats,
                            const structured::ConstraintRegistry::Stats& cs) const {
  std::string out;
  const std::string& l = model_label_;
  auto gauge = [&](const std::string& name, const char* help, double v) {
    header(out, name, "gauge", help);
    out += name + "{" + l + "} " + number(v) + "\n";
  };
  auto counter = [&](const std::string& name, const char* help, double v) {
    header(out, name, "counter", help);
    out += name + "{" + l + "} " + number(v) + "\n";
  };
  const batching::ManagerStats s = have_stats ? st : batching::ManagerStats{};
  gauge("loom:num_requests_running", "Sequences in the running batch.", static_cast<double>(s.running));
  gauge("loom:num_requests_waiting", "Sequences waiting to be scheduled.", static_cast<double>(s.waiting));
  // Parked prefix-cache pages are free to take: like vLLM, usage counts only the held ones.
  const int64_t held = std::max<int64_t>(0, s.pages_in_use - s.cached_pages);
  gauge("loom:kv_cache_usage_perc", "Share of the KV cache pool held by requests (1 = full).",
        s.pages_capacity > 0 ? static_cast<double>(held) / static_cast<double>(s.pages_capacity) : 0.0);
  counter("loom:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          static_cast<double>(s.prefix_query_tokens));
  counter("loom:prefix_cache_hits_total", "Prompt tokens served by the prefix cache.",
          static_cast<double>(s.prefix_hit_tokens));
  counter("loom:prompt_tokens_total", "Prompt tokens of the requests added.", static_cast<double>(s.prompt_tokens));
  counter("loom:generation_tokens_total", "Tokens generated.", static_cast<double>(s.generated_tokens));
  counter("loom:num_preemptions_total", "Preemptions (recompute and swap).",
          static_cast<double>(s.preempted_recompute + s.preempted_swap));
  counter("loom:spec_decode_num_draft_tokens_total", "Tokens drafted by speculative decoding (prompt lookup).",
          static_cast<double>(s.drafted_tokens));
  counter("loom:spec_decode_num_accepted_tokens_total", "Drafted tokens the model accepted.",
          static_cast<double>(s.accepted_draft_tokens));
  gauge("loom:constraint_cache_entries", "Compiled output constraints kept for later requests.",
        static_cast<double>(cs.entries));
  gauge("loom:constraint_cache_bytes", "Bytes those constraints and their masks held at the last compilation.",
        static_cast<double>(cs.bytes));
  counter("loom:constraints_compiled_total", "Output constraints compiled.", static_cast<double>(cs.compiled));
  counter("loom:constraints_evicted_total", "Compiled constraints dropped to stay within --constraint-cache-mb.",
          static_cast<double>(cs.evicted));

  std::lock_guard<std::mutex> lk(mu_);
  header(out, "loom:request_success_total", "counter", "Finished sequences by finish reason.");
  for (const auto& [reason, n] : success_)
    out += "loom:request_success_total{" + l + ",finished_reason=\"" + reason + "\"} " + std::to_string(n) + "\n";
  header(out, "loom:time_to_first_token_seconds", "histogram", "Time from the HTTP request to its first token.");
  ttft_.render(out, "loom:time_to_first_token_seconds", l);
  header(out, "loom:inter_token_latency_seconds", "histogram", "Time between two tokens of a sequence.");
  itl_.render(out, "loom:inter_token_latency_seconds", l);
  header(out, "loom:e2e_request_latency_seconds", "histogram", "Time from the HTTP request to its last output.");
  e2e_.render(out, "loom:e2e_request_latency_seconds", l);
  header(out, "loom:request_queue_time_seconds", "histogram", "Time a sequence waited before its first step.");
  queue_.render(out, "loom:request_queue_time_seconds", l);
  header(out, "loom:http_requests_total", "counter", "HTTP requests by route and status code.");
  for (const auto& [key, n] : http_)
    out += "loom:http_requests_total{" + l + ",route=\"" + escape_label(key.first) + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
  return out;
}

}  // namespace loom::serve
