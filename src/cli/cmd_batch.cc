// `loom batch`: many prompts through continuous batching. Reads JSON lines
// ({"id": .., "prompt": "..."} or {"prompt_ids": [...]}, with optional
// max_new_tokens, temperature, top_k, top_p, min_p, repetition_penalty, seed,
// stop, num_return_sequences), writes one JSON line per input (per sequence with
// num_return_sequences > 1, tagged sequence_index), in input order, and shows progress and
// a summary on stderr. Every ContinuousBatchingConfig field is a flag named
// after it; --cb-config FILE.json loads them all (flags win).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/cb_flags.h"
#include "cli/common.h"
#include "loom/batching/generation_config_file.h"
#include "loom/batching/batch_input_line.h"
#include "loom/batching/tokenizer_text_stream.h"
#include "loom/batching/generate_batch.h"
#include "loom/core/logging.h"
#include "loom/structured/constraint.h"
#include "loom/structured/token_vocabulary.h"

namespace loom::cli {

namespace {

using json = nlohmann::json;

struct BatchFlags {
  ModelOptions model;
  std::string input, output;
  SamplingFlags sampling;
  CbFlags cb;
  bool no_special_tokens = false;
  bool no_progress = false;
};

void run_batch(const BatchFlags& f) {
  const std::string dir = resolve_model_dir(f.model).value();
  apply_process_options(f.model);
  GenerationConfig gc = batching::generation_config_from_dir_or_default(dir).value();
  auto model = load_model(dir, f.model, /*tensor_parallel_ok=*/true).value();
  gc.inherit_special_tokens(model->config().eos_token_ids, model->config().bos_token_id, model->config().pad_token_id);
  // Command-line sampling flags become every request's defaults.
  const batching::GenerateOptions defaults = make_generate_options(f.sampling, gc, *model, 0);
  if (f.sampling.max_new_tokens) gc.max_new_tokens = *f.sampling.max_new_tokens;
  gc.do_sample = defaults.sampling.do_sample;
  gc.temperature = defaults.sampling.temperature;
  gc.top_k = defaults.sampling.top_k;
  gc.top_p = defaults.sampling.top_p;
  gc.min_p = defaults.sampling.min_p;
  gc.repetition_penalty = defaults.sampling.repetition_penalty;
  gc.stop_strings = defaults.stop_strings;
  gc.prompt_lookup_num_tokens = defaults.prompt_lookup_num_tokens;
  gc.eos_token_ids.assign(defaults.eos_token_ids.begin(), defaults.eos_token_ids.end());
  // Requests without a seed use --seed, else generation_config's, else 0: a line
  // samples what `loom generate` with the same settings samples.
  const batching::ContinuousBatchingConfig cb = make_cb_config(f.cb, f.sampling.seed.value_or(gc.seed.value_or(0)));
  std::shared_ptr<batching::ModelRunner> runner(batching::ModelRunner::create(model, f.model.backend).value());
  set_tensor_parallel_timeout(cb.cpu_group_timeout);
  if (follow_steps_unless_leader(*runner)) return;
  StepsLeader leader(*runner);
  if (f.model.tensor_parallel > 1 && cb.cpu_offload_space.value_or(0.0) > 0)
    throw Error(unsupported("--tensor-parallel with cpu_offload_space: swapped K/V pages would live on rank 0 only"));

  std::shared_ptr<Tokenizer> tokenizer;
  if (Tokenizer::exists_at(dir))
    tokenizer = Tokenizer::from_dir(dir).value();

  // Lines that name the same schema or grammar share one compiled constraint.
  std::unique_ptr<structured::ConstraintRegistry> constraints;
  if (tokenizer)
    constraints = std::make_unique<structured::ConstraintRegistry>(structured::TokenVocabulary::from_tokenizer(*tokenizer));

  std::ifstream file;
  std::istream* in = &std::cin;
  if (f.input != "-") {
    file.open(f.input);
    if (!file) throw Error(not_found("--input: cannot open '" + f.input + "'"));
    in = &file;
  }
  std::vector<batching::BatchInput> inputs;
  std::vector<std::optional<Status>> line_errors;
  std::string line;
  size_t number = 0;
  while (std::getline(*in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Result<batching::BatchInput> r =
        batching::parse_batch_input_line(line, number, tokenizer.get(), !f.no_special_tokens, constraints.get());
    if (r.ok()) {
      inputs.push_back(std::move(*r));
      line_errors.push_back(std::nullopt);
    } else {
      batching::BatchInput placeholder;
      placeholder.options.request_id = "line_" + std::to_string(number);
      const json j = json::parse(line, nullptr, false);  // keep the line's own id when it has one
      if (j.is_object() && j.contains("id"))
        placeholder.options.request_id = j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump();
      inputs.push_back(std::move(placeholder));
      line_errors.push_back(r.status());
    }
  }

  std::vector<batching::BatchInput> runnable;
  std::vector<size_t> slot;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!line_errors[i]) {
      // A forked sequence copies its partial last K/V page on rank 0 only.
      if (f.model.tensor_parallel > 1 && inputs[i].options.num_return_sequences.value_or(
                                             static_cast<int32_t>(gc.num_return_sequences)) > 1)
        line_errors[i] = unsupported("num_return_sequences > 1 with --tensor-parallel (forked K/V pages are not "
                                     "copied on the other ranks yet)");
      else {
        runnable.push_back(inputs[i]);
        slot.push_back(i);
      }
    }

  batching::GenerateBatchOptions opts;
  if (tokenizer) {
    opts.manager.text_stream = [tokenizer](const std::vector<int32_t>& prompt) -> std::unique_ptr<batching::TextStream> {
      auto s = std::make_unique<batching::TokenizerTextStream>(tokenizer);
      s->start(prompt);
      return s;
    };
  }
  const bool tty = isatty(STDERR_FILENO);
  if (!f.no_progress) {
    opts.progress = [tty](const batching::BatchProgress& p) {
      std::fprintf(stderr, "%s[batch] %lld/%lld requests · %lld tokens · %.1f tok/s · KV pages %lld/%lld%s",
                   tty ? "\r" : "", static_cast<long long>(p.done), static_cast<long long>(p.total),
                   static_cast<long long>(p.generated_tokens), p.tokens_per_second,
                   static_cast<long long>(p.pages_in_use), static_cast<long long>(p.pages_capacity), tty ? "" : "\n");
      std::fflush(stderr);
    };
  }
  const batching::BatchResult result = batching::generate_batch(runner, runnable, gc, cb, opts).value();
  if (!f.no_progress && tty) std::fprintf(stderr, "\n");

  std::ofstream out_file;
  std::ostream* out = &std::cout;
  if (f.output != "-") {
    out_file.open(f.output);
    if (!out_file) throw Error(io_error("--output: cannot write '" + f.output + "'"));
    out = &out_file;
  }
  // The outputs of runnable input k start at first_output[k]; sequences k > 0 of
  // an input follow its first one.
  std::vector<size_t> first_output(slot.size() + 1, result.outputs.size());
  for (size_t k = 0, pos = 0; k < slot.size(); ++k) {
    first_output[k] = pos;
    const std::string& base = result.outputs[pos].request_id;
    ++pos;
    while (pos < result.outputs.size() && result.outputs[pos].sequence_index > 0 &&
           result.outputs[pos].parent_request_id == base)
      ++pos;
  }
  std::vector<size_t> runnable_of(inputs.size(), 0);
  for (size_t k = 0; k < slot.size(); ++k) runnable_of[slot[k]] = k;
  int64_t finished = 0, failed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (line_errors[i]) {
      json j;
      j["id"] = *inputs[i].options.request_id;
      j["prompt_ids"] = json::array();
      j["generated_ids"] = json::array();
      j["status"] = "FAILED";
      j["error"] = line_errors[i]->to_string();
      ++failed;
      *out << j.dump() << "\n";
      continue;
    }
    const size_t k = runnable_of[i];
    const size_t begin = first_output[k], end = first_output[k + 1];
    for (size_t pos = begin; pos < end; ++pos) {
      const batching::GenerationOutput& o = result.outputs[pos];
      json j;
      j["id"] = o.parent_request_id.empty() ? o.request_id : o.parent_request_id;
      if (end - begin > 1) j["sequence_index"] = o.sequence_index;
      j["prompt_ids"] = o.prompt_ids;
      j["generated_ids"] = o.generated_tokens;
      if (tokenizer) j["text"] = o.text;
      j["status"] = batching::request_status_name(o.status);
      j["finish_reason"] = generation::finish_reason_name(o.finish_reason);
      j["error"] = o.error.empty() ? json(nullptr) : json(o.error);
      if (cb.return_logprobs) j["logprobs"] = o.logprobs;
      if (o.drafted_tokens > 0) {
        j["drafted_tokens"] = o.drafted_tokens;
        j["accepted_draft_tokens"] = o.accepted_draft_tokens;
      }
      (o.status == batching::RequestStatus::kFinished ? finished : failed) += 1;
      *out << j.dump() << "\n";
    }
  }
  out->flush();
  const batching::ManagerStats& s = result.stats;
  std::fprintf(stderr,
               "[batch] %zu requests (%lld finished, %lld failed) · %lld prompt + %lld generated tokens in %.2f s · "
               "%.1f generated tok/s · prefix-cache hits %lld tokens · preemptions %lld (recompute %lld, swap %lld) · "
               "peak KV pages %lld/%lld\n",
               inputs.size(), static_cast<long long>(finished), static_cast<long long>(failed),
               static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.generated_tokens), result.seconds,
               result.seconds > 0 ? static_cast<double>(s.generated_tokens) / result.seconds : 0.0,
               static_cast<long long>(s.prefix_hit_tokens),
               static_cast<long long>(s.preempted_recompute + s.preempted_swap),
               static_cast<long long>(s.preempted_recompute), static_cast<long long>(s.preempted_swap),
               static_cast<long long>(s.peak_pages_in_use), static_cast<long long>(s.pages_capacity));
  if (s.drafted_tokens > 0)
    std::fprintf(stderr, "[batch] prompt lookup: %lld drafted tokens, %lld accepted (%.1f%%)\n",
                 static_cast<long long>(s.drafted_tokens), static_cast<long long>(s.accepted_draft_tokens),
                 100.0 * static_cast<double>(s.accepted_draft_tokens) / static_cast<double>(s.drafted_tokens));
}

}  // namespace

void add_batch_command(CLI::App& app) {
  auto f = std::make_shared<BatchFlags>();
  auto* cmd = app.add_subcommand("batch", "Generate for many prompts (JSON lines) with continuous batching");
  add_model_options(cmd, &f->model);
  cmd->add_option("--input,-i", f->input, "JSON lines: {\"id\", \"prompt\" | \"prompt_ids\", max_new_tokens, temperature, ...}; - for stdin")
      ->required();
  cmd->add_option("--output,-o", f->output, "Results as JSON lines, in input order; - for stdout")->required();
  add_sampling_options(cmd, &f->sampling);
  add_cb_options(cmd, &f->cb);
  cmd->add_flag("--no-special-tokens", f->no_special_tokens, "Do not add BOS/EOS when tokenizing text prompts");
  cmd->add_flag("--no-progress", f->no_progress, "No progress line on stderr");
  cmd->callback([f] { run_batch(*f); });
}

}  // namespace loom::cli
