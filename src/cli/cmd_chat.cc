// `loom chat`: a conversation rendered through the model's chat template
// (tokenizer_config.json), the reply streamed. Interactive on a terminal (one
// line per turn, /reset and /exit), or one turn per --message for scripts.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "loom/batching/generation_config_file.h"
#include "loom/batching/tokenizer_text_stream.h"
#include "loom/tokenizer/chat_template.h"

namespace loom::cli {

namespace {
struct ChatFlags {
  ModelOptions model;
  SamplingFlags sampling;
  std::string system;
  std::vector<std::string> messages;
  std::string template_name = "default";
  bool show_prompt = false;
  bool json = false;
};

Result<tok::ChatTemplate> load_template(const Tokenizer& t, const std::string& name, const std::string& dir) {
  const auto& all = t.chat_templates();
  auto it = all.find(name);
  if (it == all.end()) {
    if (all.empty()) return not_found("'" + dir + "/tokenizer_config.json' has no chat_template");
    std::string names;
    for (const auto& [k, v] : all) names += (names.empty() ? "" : ", ") + k;
    return not_found("chat template '" + name + "' not found (available: " + names + ")");
  }
  return tok::ChatTemplate::create(it->second, t.bos_token().value_or(""), t.eos_token().value_or(""));
}

void run_chat(const ChatFlags& f) {
  const std::string dir = resolve_model_dir(f.model).value();
  apply_process_options(f.model);
  GenerationConfig gc = batching::generation_config_from_dir_or_default(dir).value();
  auto model = load_model(dir, f.model).value();
  auto runner = batching::ModelRunner::create(model, f.model.backend).value();
  auto text = batching::open_text_stream(dir).value();
  if (!text) throw Error(invalid_argument("'" + dir + "' has no tokenizer.json; chat needs one"));
  const tok::ChatTemplate tmpl = load_template(text->tokenizer(), f.template_name, dir).value();

  nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
  if (!f.system.empty()) conversation.push_back({{"role", "system"}, {"content", f.system}});
  const bool interactive = f.messages.empty();
  const bool tty = isatty(STDIN_FILENO);
  size_t next_message = 0;
  nlohmann::json transcript = nlohmann::json::array();
  while (true) {
    std::string user;
    if (interactive) {
      if (tty) std::fputs("> ", stdout), std::fflush(stdout);
      if (!std::getline(std::cin, user)) break;
      if (user == "/exit" || user == "/quit") break;
      if (user == "/reset") {
        conversation.erase(conversation.begin() + (f.system.empty() ? 0 : 1), conversation.end());
        continue;
      }
      if (user.empty()) continue;
    } else {
      if (next_message >= f.messages.size()) break;
      user = f.messages[next_message++];
    }
    conversation.push_back({{"role", "user"}, {"content", user}});
    const std::string prompt_text = tmpl.apply(conversation, /*add_generation_prompt=*/true).value();
    if (f.show_prompt) std::fprintf(stderr, "%s", prompt_text.c_str());
    // The template already holds the special tokens it wants (BOS included).
    const std::vector<int32_t> prompt = text->encode(prompt_text, /*add_special_tokens=*/false).value();
    batching::GenerateOptions o = make_generate_options(f.sampling, gc, *model, static_cast<int64_t>(prompt.size()));
    if (auto eos = text->tokenizer().eos_token_id()) o.eos_token_ids.push_back(*eos);
    text->start(prompt);
    std::function<void(const batching::TokenEvent&)> on_token;
    if (!f.json) on_token = [](const batching::TokenEvent& ev) { std::fputs(ev.text.c_str(), stdout), std::fflush(stdout); };
    batching::GenerateResult r = batching::generate(*runner, prompt, o, text.get(), on_token).value();
    if (!f.json) std::fputs("\n", stdout);
    conversation.push_back({{"role", "assistant"}, {"content", r.text}});
    transcript.push_back({{"user", user},
                          {"assistant", r.text},
                          {"prompt_tokens", prompt.size()},
                          {"generated_ids", r.generated_ids},
                          {"finish_reason", generation::finish_reason_name(r.finish_reason)}});
  }
  if (f.json) std::printf("%s\n", transcript.dump().c_str());
}
}  // namespace

void add_chat_command(CLI::App& app) {
  auto f = std::make_shared<ChatFlags>();
  auto* cmd = app.add_subcommand("chat", "Chat with a model through its chat template (interactive, or --message)");
  add_model_options(cmd, &f->model);
  add_sampling_options(cmd, &f->sampling);
  cmd->add_option("--system", f->system, "System message");
  cmd->add_option("--message", f->messages, "A user turn (repeatable); without it, read turns from stdin");
  cmd->add_option("--template", f->template_name, "Which named chat template of tokenizer_config.json");
  cmd->add_flag("--show-prompt", f->show_prompt, "Print the rendered prompt to stderr");
  cmd->add_flag("--json", f->json, "Print the transcript as JSON at the end");
  cmd->callback([f] { run_chat(*f); });
}

}  // namespace loom::cli
