// `loom perplexity`: mean per-token cross-entropy of a model on a text file.
// The file is encoded whole (no special tokens) and cut into consecutive pieces
// of seq_len - 1 tokens; each piece runs as its own sequence [BOS] + piece with a
// fresh context, and the logits at position j score piece[j] — every token is
// scored exactly once (the procedure models/loom-kjv-tiny/README.md reports).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/kv_cache_flags.h"
#include "loom/batching/tokenizer_text_stream.h"
#include "loom/batching/model_runner.h"

namespace loom::cli {

namespace {
struct PerplexityFlags {
  ModelOptions model;
  std::string file;
  int64_t seq_len = 256;
  int batch = 8;
  bool json = false;
  bool quiet = false;
  KvCacheFlags kv;
};

void progress(int64_t done, int64_t total, double seconds, bool quiet) {
  if (quiet) return;
  const int width = 30;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "\r[%.*s%*s] %lld/%lld tokens  %.0f tok/s", filled, "##############################",
               width - filled, "", static_cast<long long>(done), static_cast<long long>(total),
               seconds > 0 ? done / seconds : 0.0);
  std::fflush(stderr);
}

void run_perplexity(const PerplexityFlags& f) {
  const std::string dir = resolve_model_dir(f.model).value();
  apply_process_options(f.model);
  std::ifstream in(f.file, std::ios::binary);
  if (!in) throw Error(not_found("cannot read --file '" + f.file + "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  auto model = load_model(dir, f.model).value();
  auto runner = batching::ModelRunner::create(model, f.model.backend).value();
  auto text = batching::open_text_stream(dir).value();
  if (!text) throw Error(invalid_argument("'" + dir + "' has no tokenizer.json; perplexity needs one"));
  const std::vector<int32_t> ids = text->encode(ss.str(), /*add_special_tokens=*/false).value();
  if (ids.empty()) throw Error(invalid_argument("'" + f.file + "' encodes to no tokens"));
  const std::optional<int32_t> bos = text->tokenizer().bos_token_id();
  if (f.seq_len < 2) throw Error(invalid_argument("--seq-len must be ≥ 2"));
  // With a BOS token each piece is scored from BOS alone; without one, the first
  // token of each piece only serves as context.
  const int64_t piece = bos ? f.seq_len - 1 : f.seq_len;
  const int64_t vocab = model->vocab_size();

  std::vector<int64_t> starts;
  for (int64_t s = 0; s < static_cast<int64_t>(ids.size()); s += piece) starts.push_back(s);
  runtime::ContiguousKvCache cache(runner->kv_layout(), f.batch, f.seq_len, kv_format_from_flags(f.kv));
  double total = 0;
  int64_t count = 0;
  const int64_t to_score = bos ? static_cast<int64_t>(ids.size())
                               : static_cast<int64_t>(ids.size()) - static_cast<int64_t>(starts.size());
  auto t0 = std::chrono::steady_clock::now();
  for (size_t g = 0; g < starts.size(); g += static_cast<size_t>(f.batch)) {
    std::vector<std::vector<int32_t>> inputs, targets;
    std::vector<batching::SequenceChunk> chunks;
    for (size_t i = g; i < std::min(starts.size(), g + static_cast<size_t>(f.batch)); ++i) {
      const int64_t b = starts[i], e = std::min<int64_t>(b + piece, static_cast<int64_t>(ids.size()));
      if (e <= b) continue;
      const std::vector<int32_t> window(ids.begin() + b, ids.begin() + e);
      // Inputs predict the window's tokens: after BOS all of them, else all but the first.
      std::vector<int32_t> x, y;
      if (bos) {
        x.push_back(*bos);
        x.insert(x.end(), window.begin(), window.end() - 1);
        y = window;
      } else {
        x = window;
        y.assign(window.begin() + 1, window.end());
      }
      if (y.empty()) continue;
      inputs.push_back(std::move(x));
      targets.push_back(std::move(y));
    }
    for (auto& x : inputs) chunks.push_back({x.data(), static_cast<int64_t>(x.size()), 0});
    if (chunks.empty()) continue;
    Tensor logits = runner->step(chunks, cache, batching::LogitsRows::kAllTokens).value();
    const float* row = logits.data_as<float>();
    for (size_t s = 0; s < inputs.size(); ++s) {
      // Row j scores targets[j] (with BOS: piece[j]; without: input[j + 1]).
      for (size_t j = 0; j < inputs[s].size(); ++j, row += vocab) {
        const size_t t = j;
        if (t >= targets[s].size()) continue;
        double mx = row[0];
        for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, static_cast<double>(row[v]));
        double z = 0;
        for (int64_t v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
        total += mx + std::log(z) - row[targets[s][t]];
        ++count;
      }
    }
    progress(count, to_score, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), f.quiet);
  }
  if (!f.quiet) std::fprintf(stderr, "\n");
  const double loss = total / static_cast<double>(count);
  if (f.json) {
    nlohmann::json j = {{"loss", loss}, {"perplexity", std::exp(loss)}, {"tokens", count}, {"seq_len", f.seq_len}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("loss %.6f nats/token, perplexity %.4f, %lld tokens scored (seq_len %lld)\n", loss, std::exp(loss),
                static_cast<long long>(count), static_cast<long long>(f.seq_len));
  }
}
}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto f = std::make_shared<PerplexityFlags>();
  auto* cmd = app.add_subcommand("perplexity", "Per-token loss and perplexity of a model on a text file");
  add_model_options(cmd, &f->model);
  cmd->add_option("--file,-f", f->file, "UTF-8 text file to score")->required();
  cmd->add_option("--seq-len", f->seq_len, "Positions per chunk, BOS included")->check(CLI::PositiveNumber);
  cmd->add_option("--batch", f->batch, "Chunks run together per step")->check(CLI::PositiveNumber);
  cmd->add_flag("--json", f->json, "Print one JSON object: loss, perplexity, tokens, seq_len");
  cmd->add_flag("--quiet,-q", f->quiet, "No progress bar");
  add_kv_cache_options(cmd, &f->kv);
  cmd->callback([f] { run_perplexity(*f); });
}

}  // namespace loom::cli
