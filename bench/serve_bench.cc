// serve_bench: a bounded load generator for `loom serve` (or any OpenAI-compatible
// server), like vLLM's benchmark_serving: N requests from a `loom batch` JSON-lines
// file, at a concurrency or a Poisson rate, streamed, so each token's arrival is
// timed. Prints request throughput, output tok/s, and TTFT / TPOT / ITL percentiles.
//
//   serve_bench --url http://127.0.0.1:8000 --input prompts.jsonl --num-requests 64 --concurrency 16
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Sample {
  bool ok = false;
  std::string error;
  double ttft = 0, e2e = 0;
  std::vector<double> itl;
  int64_t output_tokens = 0, prompt_tokens = 0;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank)), hi = static_cast<size_t>(std::ceil(rank));
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

// One streamed completion; timings from the chunks as they arrive.
Sample run_one(const std::string& host, int port, const json& body, const std::string& api_key) {
  Sample s;
  httplib::Client cli(host, port);
  cli.set_read_timeout(600);
  cli.set_write_timeout(60);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  if (!api_key.empty()) req.set_header("Authorization", "Bearer " + api_key);
  const auto t0 = Clock::now();
  std::string buffer;
  double last = -1;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buffer.append(data, len);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") continue;
      const json j = json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) {
        s.error = j["error"].value("message", "error event");
        continue;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        s.output_tokens = j["usage"].value("completion_tokens", 0);
        s.prompt_tokens = j["usage"].value("prompt_tokens", 0);
      }
      if (!j.contains("choices") || j["choices"].empty()) continue;
      const double now = std::chrono::duration<double>(Clock::now() - t0).count();
      if (last < 0) s.ttft = now;
      else s.itl.push_back(now - last);
      last = now;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = cli.send(req, res, err);
  s.e2e = std::chrono::duration<double>(Clock::now() - t0).count();
  if (sent && res.status == 200 && last < 0 && !buffer.empty()) {  // a plain JSON response
    const json j = json::parse(buffer, nullptr, false);
    if (!j.is_discarded() && j.contains("usage")) {
      s.output_tokens = j["usage"].value("completion_tokens", 0);
      s.prompt_tokens = j["usage"].value("prompt_tokens", 0);
      s.ttft = s.e2e;
      last = s.e2e;
    }
  }
  if (!sent) s.error = "HTTP error " + std::to_string(static_cast<int>(err));
  else if (res.status != 200) s.error = "status " + std::to_string(res.status) + ": " + res.body.substr(0, 200);
  s.ok = s.error.empty() && last >= 0;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"serve_bench: load an OpenAI-compatible server with streamed completions and time them"};
  std::string url = "http://127.0.0.1:8000", input, api_key, model;
  int num_requests = 64, concurrency = 16;
  double rate = 0;
  int64_t max_tokens = 0;
  uint64_t seed = 0;
  bool as_json = false, no_stream = false;
  app.add_option("--url", url, "Server base URL (http://host:port)");
  app.add_option("--input,-i", input, "JSON lines as loom batch reads them: {\"prompt\" | \"prompt_ids\", \"max_new_tokens\"}")
      ->required()->check(CLI::ExistingFile);
  app.add_option("--num-requests,-n", num_requests, "Requests to send (the file's lines, cycled)")->check(CLI::PositiveNumber);
  app.add_option("--concurrency,-c", concurrency, "Requests in flight at once")->check(CLI::PositiveNumber);
  app.add_option("--request-rate", rate, "Poisson arrivals per second (0: as fast as the concurrency allows)");
  app.add_option("--max-tokens", max_tokens, "max_tokens of every request (default: the line's max_new_tokens, else 128)");
  app.add_option("--api-key", api_key, "Bearer key");
  app.add_option("--model", model, "model field of every request (default: none)");
  app.add_option("--seed", seed, "Seed of the arrival times");
  app.add_flag("--json", as_json, "Print one JSON object instead of the table");
  app.add_flag("--no-stream", no_stream, "Plain (non-streamed) requests: throughput and end-to-end latency only");
  CLI11_PARSE(app, argc, argv);

  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) {
    std::fprintf(stderr, "serve_bench: --url must start with http://\n");
    return 2;
  }
  const std::string hostport = url.substr(scheme.size());
  const size_t colon = hostport.rfind(':');
  const std::string host = colon == std::string::npos ? hostport : hostport.substr(0, colon);
  const int port = colon == std::string::npos ? 80 : std::atoi(hostport.c_str() + colon + 1);

  std::vector<json> bodies;
  std::ifstream in(input);
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object() || !(j.contains("prompt") || j.contains("prompt_ids"))) {
      std::fprintf(stderr, "serve_bench: %s line %zu: needs a JSON object with prompt or prompt_ids\n", input.c_str(), number);
      return 2;
    }
    json b = {{"prompt", j.contains("prompt_ids") ? j["prompt_ids"] : j["prompt"]},
              {"max_tokens", max_tokens > 0 ? max_tokens : j.value("max_new_tokens", int64_t{128})},
              {"temperature", j.value("temperature", 0.0)},
              {"stream", !no_stream}};
    if (!no_stream) b["stream_options"] = {{"include_usage", true}};
    if (j.contains("seed")) b["seed"] = j["seed"];
    if (!model.empty()) b["model"] = model;
    bodies.push_back(std::move(b));
  }
  if (bodies.empty()) {
    std::fprintf(stderr, "serve_bench: %s has no requests\n", input.c_str());
    return 2;
  }

  // Arrival times: all at once (bounded by the concurrency), or Poisson.
  std::vector<double> arrivals(static_cast<size_t>(num_requests), 0.0);
  if (rate > 0) {
    std::mt19937_64 rng(seed);
    std::exponential_distribution<double> gap(rate);
    double t = 0;
    for (double& a : arrivals) a = (t += gap(rng));
  }
  std::vector<Sample> samples(static_cast<size_t>(num_requests));
  std::atomic<int> next{0};
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < concurrency; ++w)
    workers.emplace_back([&] {
      while (true) {
        const int i = next++;
        if (i >= num_requests) return;
        const double wait = arrivals[static_cast<size_t>(i)] - std::chrono::duration<double>(Clock::now() - start).count();
        if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
        samples[static_cast<size_t>(i)] = run_one(host, port, bodies[static_cast<size_t>(i) % bodies.size()], api_key);
      }
    });
  for (auto& t : workers) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double client_cpu = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                            static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;

  std::vector<double> ttft, tpot, itl, e2e;
  int64_t output = 0, prompt = 0;
  int failed = 0;
  std::string first_error;
  for (const Sample& s : samples) {
    if (!s.ok) {
      if (first_error.empty()) first_error = s.error;
      ++failed;
      continue;
    }
    output += s.output_tokens;
    prompt += s.prompt_tokens;
    ttft.push_back(s.ttft);
    e2e.push_back(s.e2e);
    if (s.output_tokens > 1) tpot.push_back((s.e2e - s.ttft) / static_cast<double>(s.output_tokens - 1));
    itl.insert(itl.end(), s.itl.begin(), s.itl.end());
  }
  const int done = num_requests - failed;
  json r = {{"requests", num_requests},
            {"failed", failed},
            {"concurrency", concurrency},
            {"request_rate", rate},
            {"seconds", seconds},
            {"request_throughput", done / seconds},
            {"prompt_tokens", prompt},
            {"output_tokens", output},
            {"output_tokens_per_second", static_cast<double>(output) / seconds},
            {"client_cpu_seconds", client_cpu},
            {"stream", !no_stream}};
  for (const auto& [name, v] : {std::pair<const char*, const std::vector<double>*>{"ttft", &ttft}, {"tpot", &tpot}, {"itl", &itl}, {"e2e", &e2e}})
    for (double p : {50.0, 90.0, 99.0}) r[std::string(name) + "_p" + std::to_string(static_cast<int>(p)) + "_ms"] = percentile(*v, p) * 1000;
  if (as_json) {
    std::printf("%s\n", r.dump().c_str());
  } else {
    std::printf("serve_bench: %d requests (%d failed) at concurrency %d%s in %.2f s\n", num_requests, failed, concurrency,
                rate > 0 ? (", rate " + std::to_string(rate) + "/s").c_str() : "", seconds);
    std::printf("  request throughput   %10.2f req/s\n", r["request_throughput"].get<double>());
    std::printf("  output tokens        %10lld (%.1f tok/s)\n", static_cast<long long>(output), r["output_tokens_per_second"].get<double>());
    std::printf("  client CPU           %10.2f s (this load generator's own share of the machine)\n", client_cpu);
    std::printf("  %-8s %10s %10s %10s\n", "ms", "p50", "p90", "p99");
    for (const char* name : {"ttft", "tpot", "itl", "e2e"})
      std::printf("  %-8s %10.1f %10.1f %10.1f\n", name, r[std::string(name) + "_p50_ms"].get<double>(),
                  r[std::string(name) + "_p90_ms"].get<double>(), r[std::string(name) + "_p99_ms"].get<double>());
  }
  if (failed) std::fprintf(stderr, "serve_bench: %d requests failed; first: %s\n", failed, first_error.c_str());
  return failed ? 1 : 0;
}
