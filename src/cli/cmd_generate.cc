// `loom generate`: one prompt in, its continuation streamed out (or one JSON
// object with --json). Defaults come from the model's generation_config.json,
// as in Transformers; flags override them.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/text_stream.h"
#include "loom/batching/generate.h"
#include "loom/generation/generation_config.h"

namespace loom::cli {

namespace {
struct GenerateFlags {
  ModelOptions model;
  std::string prompt;
  std::string prompt_ids;
  std::optional<int64_t> max_new_tokens;
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int32_t> top_k;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool greedy = false;
  bool json = false;
  bool no_special_tokens = false;
};

void run_generate(const GenerateFlags& f) {
  const std::string dir = resolve_model_dir(f.model).value();
  apply_threads(f.model);
  GenerationConfig gc = GenerationConfig::from_dir_or_default(dir).value();
  auto model = models::Model::load(dir).value();
  auto runner = batching::ModelRunner::create(model, f.model.backend).value();
  auto text = open_text_stream(dir);  // null without tokenizer.json

  std::vector<int32_t> prompt;
  if (!f.prompt_ids.empty()) {
    prompt = parse_id_list(f.prompt_ids).value();
  } else {
    if (!text.ok()) throw Error(text.status());
    if (!*text) throw Error(invalid_argument("'" + dir + "' has no tokenizer.json: use --prompt-ids instead of --prompt"));
    prompt = (*text)->encode(f.prompt, !f.no_special_tokens).value();
  }

  batching::GenerateOptions o;
  o.max_new_tokens = f.max_new_tokens.value_or(gc.new_token_budget(static_cast<int64_t>(prompt.size())));
  o.sampling.do_sample = gc.do_sample;
  o.sampling.temperature = static_cast<float>(gc.temperature);
  o.sampling.top_k = static_cast<int32_t>(gc.top_k);
  o.sampling.top_p = static_cast<float>(gc.top_p);
  o.sampling.min_p = static_cast<float>(gc.min_p.value_or(0.0));
  o.sampling.repetition_penalty = static_cast<float>(gc.repetition_penalty);
  // An explicit sampling flag turns sampling on, as users of llama.cpp expect.
  if (f.temperature) { o.sampling.temperature = *f.temperature; o.sampling.do_sample = *f.temperature > 0; }
  if (f.top_k) { o.sampling.top_k = *f.top_k; o.sampling.do_sample = true; }
  if (f.top_p) { o.sampling.top_p = *f.top_p; o.sampling.do_sample = true; }
  if (f.min_p) { o.sampling.min_p = *f.min_p; o.sampling.do_sample = true; }
  if (f.repetition_penalty) o.sampling.repetition_penalty = *f.repetition_penalty;
  if (f.greedy) o.sampling.do_sample = false;
  o.seed = f.seed.value_or(gc.seed.value_or(0));
  for (int64_t id : gc.eos_token_ids) o.eos_token_ids.push_back(static_cast<int32_t>(id));
  if (o.eos_token_ids.empty())
    for (int64_t id : model->config().eos_token_ids) o.eos_token_ids.push_back(static_cast<int32_t>(id));
  o.stop_strings = gc.stop_strings;
  o.stop_strings.insert(o.stop_strings.end(), f.stop.begin(), f.stop.end());

  batching::TextStream* stream = text.ok() ? text->get() : nullptr;
  if (stream) (*text)->start(prompt);
  std::function<void(const batching::TokenEvent&)> on_token;
  if (!f.json) {
    on_token = [&](const batching::TokenEvent& ev) {
      if (stream) std::fputs(ev.text.c_str(), stdout);
      else if (ev.id >= 0) std::printf("%d ", ev.id);
      std::fflush(stdout);
    };
  }
  batching::GenerateResult r = batching::generate(*runner, prompt, o, stream, on_token).value();
  if (!f.json) {
    std::printf("\n");
    return;
  }
  nlohmann::json j;
  j["prompt_ids"] = r.prompt_ids;
  j["generated_ids"] = r.generated_ids;
  if (stream) j["text"] = r.text;
  j["finish_reason"] = generation::finish_reason_name(r.finish_reason);
  j["logprobs"] = r.logprobs;
  const auto& t = r.timings;
  j["timings"] = {
      {"prompt_tokens", t.prompt_tokens},
      {"generated_tokens", r.generated_ids.size()},
      {"prefill_seconds", t.prefill_seconds},
      {"decode_seconds", t.decode_seconds},
      {"prefill_tokens_per_second", t.prefill_seconds > 0 ? t.prompt_tokens / t.prefill_seconds : 0.0},
      {"decode_tokens_per_second", t.decode_seconds > 0 ? t.decode_steps / t.decode_seconds : 0.0},
  };
  std::printf("%s\n", j.dump().c_str());
}
}  // namespace

void add_generate_command(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  auto* cmd = app.add_subcommand("generate", "Generate a continuation of a prompt, streamed to stdout");
  add_model_options(cmd, &f->model);
  auto* p = cmd->add_option("--prompt,-p", f->prompt, "Prompt text (needs the model's tokenizer.json)");
  auto* ids = cmd->add_option("--prompt-ids", f->prompt_ids, "Prompt as token ids: 1,2,3");
  p->excludes(ids);
  cmd->add_option("--max-new-tokens,-n", f->max_new_tokens, "Tokens to generate (default: generation_config.json)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", f->temperature, "Sampling temperature (0 = greedy)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", f->top_k, "Keep the k most likely tokens (0 = off)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", f->top_p, "Nucleus sampling mass in (0, 1]");
  cmd->add_option("--min-p", f->min_p, "Drop tokens below min_p × p(top token)");
  cmd->add_option("--repetition-penalty", f->repetition_penalty, "Penalty > 0 for tokens already seen (1 = off)");
  cmd->add_option("--seed", f->seed, "Random seed for sampling");
  cmd->add_option("--stop", f->stop, "Stop when this string appears (repeatable)");
  cmd->add_flag("--greedy", f->greedy, "Always pick the most likely token");
  cmd->add_flag("--no-special-tokens", f->no_special_tokens, "Do not add BOS/EOS when tokenizing the prompt");
  cmd->add_flag("--json", f->json, "Print one JSON object (prompt_ids, generated_ids, text, finish_reason, timings)");
  cmd->callback([f] {
    if (f->prompt.empty() && f->prompt_ids.empty()) throw Error(invalid_argument("give --prompt TEXT or --prompt-ids 1,2,3"));
    run_generate(*f);
  });
}

}  // namespace loom::cli
