// `loom generate`: one prompt in, its continuation streamed out (or one JSON
// object with --json). Defaults come from the model's generation_config.json,
// as in Transformers; flags override them.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/constraint_flags.h"
#include "cli/kv_cache_flags.h"
#include "loom/batching/tokenizer_text_stream.h"
#include "loom/batching/continuous_batching_config.h"
#include "loom/batching/generate.h"
#include "loom/batching/generation_config_file.h"

namespace loom::cli {

namespace {
struct GenerateFlags {
  ModelOptions model;
  std::string prompt;
  std::string prompt_ids;
  SamplingFlags sampling;
  ConstraintFlags constraint;
  bool json = false;
  bool no_special_tokens = false;
  KvCacheFlags kv;
  double cpu_group_timeout = 300.0;
};

void run_generate(const GenerateFlags& f) {
  const std::string dir = resolve_model_dir(f.model).value();
  apply_process_options(f.model);
  GenerationConfig gc = batching::generation_config_from_dir_or_default(dir).value();
  auto model = load_model(dir, f.model, /*tensor_parallel_ok=*/true).value();
  auto runner = batching::ModelRunner::create(model, f.model.backend).value();
  set_tensor_parallel_timeout(f.cpu_group_timeout);
  if (follow_steps_unless_leader(*runner)) return;
  StepsLeader leader(*runner);
  auto text = batching::open_text_stream(dir);  // null without tokenizer.json

  std::vector<int32_t> prompt;
  if (!f.prompt_ids.empty()) {
    prompt = parse_id_list(f.prompt_ids).value();
  } else {
    if (!text.ok()) throw Error(text.status());
    if (!*text) throw Error(invalid_argument("'" + dir + "' has no tokenizer.json: use --prompt-ids instead of --prompt"));
    prompt = (*text)->encode(f.prompt, !f.no_special_tokens).value();
  }

  batching::GenerateOptions o = make_generate_options(f.sampling, gc, *model, static_cast<int64_t>(prompt.size()));
  o.kv_format = kv_format_from_flags(f.kv);
  {
    std::shared_ptr<Tokenizer> tokenizer;
    if (Tokenizer::exists_at(dir)) tokenizer = Tokenizer::from_path(dir).value();
    o.constraint = compile_constraint(f.constraint, tokenizer.get()).value();
  }

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
      {"drafted_tokens", t.drafted_tokens},
      {"accepted_draft_tokens", t.accepted_draft_tokens},
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
  add_sampling_options(cmd, &f->sampling);
  add_constraint_options(cmd, &f->constraint);
  cmd->add_flag("--no-special-tokens", f->no_special_tokens, "Do not add BOS/EOS when tokenizing the prompt");
  cmd->add_flag("--json", f->json, "Print one JSON object (prompt_ids, generated_ids, text, finish_reason, timings)");
  add_kv_cache_options(cmd, &f->kv);
  cmd->add_option("--cpu-group-timeout", f->cpu_group_timeout,
                  "With --tensor-parallel: seconds a rank waits for the others inside a step before ending the job")
      ->check(CLI::PositiveNumber);
  cmd->callback([f] {
    if (f->prompt.empty() && f->prompt_ids.empty()) throw Error(invalid_argument("give --prompt TEXT or --prompt-ids 1,2,3"));
    run_generate(*f);
  });
}

}  // namespace loom::cli
