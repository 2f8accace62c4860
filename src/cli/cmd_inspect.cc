// `loom inspect DIR`: what a checkpoint is, without running it; `loom inspect
// FILE.gguf`: what a GGUF file holds, as stored.
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/inspect_gguf.h"
#include "loom/models/model.h"

namespace loom::cli {

namespace {
std::string human_count(int64_t n) {
  char buf[32];
  if (n >= 1000000000) std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1000000) std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1000) std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return buf;
}
std::string human_bytes(uint64_t n) {
  char buf[32];
  if (n >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", n / double(1ull << 30));
  else if (n >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", n / double(1ull << 20));
  else std::snprintf(buf, sizeof buf, "%.1f KiB", n / 1024.0);
  return buf;
}
}  // namespace

void add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Describe a checkpoint (architecture, parameters, dtypes, shards, layers, RoPE) or a GGUF file");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("model_dir", *dir, "Checkpoint folder or .gguf file (default: the bundled model)");
  cmd->callback([dir] {
    if (is_gguf_path(*dir)) return inspect_gguf(*dir);
    ModelOptions o;
    o.model_dir = *dir;
    const std::string path = resolve_model_dir(o).value();
    auto model = models::Model::load(path).value();
    const ModelConfig& c = model->config();
    const Checkpoint& ck = model->checkpoint();
    std::printf("model:          %s\n", path.c_str());
    std::printf("architecture:   %s (model_type %s)\n", model->module().class_name().c_str(), c.model_type.c_str());
    std::printf("parameters:     %s (%lld)\n", human_count(ck.parameter_count()).c_str(),
                static_cast<long long>(ck.parameter_count()));
    std::printf("dtypes:        ");
    const auto bytes = ck.bytes_per_dtype();
    for (const auto& [dt, n] : ck.parameters_per_dtype())
      std::printf(" %s: %s params, %s;", std::string(dtype_name(dt)).c_str(), human_count(n).c_str(),
                  human_bytes(bytes.at(dt)).c_str());
    std::printf("\nshards:         %zu (%s)\n", ck.shard_files().size(), human_bytes(ck.total_bytes()).c_str());
    for (const auto& f : ck.shard_files()) std::printf("                %s\n", f.c_str());
    std::printf("layers:         %lld × decoder (hidden %lld, intermediate %lld, act %s)\n",
                static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
                static_cast<long long>(c.intermediate_size), c.hidden_act.c_str());
    std::printf("attention:      %lld heads, %lld kv heads (GQA %lld:1), head_dim %lld\n",
                static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.num_key_value_heads),
                static_cast<long long>(c.num_attention_heads / c.num_key_value_heads), static_cast<long long>(c.head_dim));
    if (c.num_experts > 0)
      std::printf("experts:        %lld routed, top-%lld per token (sparse MoE MLP)\n",
                  static_cast<long long>(c.num_experts), static_cast<long long>(c.num_experts_per_tok));
    std::map<std::string, int> kinds;
    for (const auto& t : c.layer_types) kinds[t]++;
    std::printf("layer types:   ");
    for (const auto& [k, n] : kinds) std::printf(" %s × %d;", k.c_str(), n);
    if (c.sliding_window) std::printf(" sliding_window %lld", static_cast<long long>(*c.sliding_window));
    std::printf("\nrope:           type %s, theta %g, factor %g, rotary_dim %lld, max positions %lld\n",
                c.rope_scaling.rope_type.c_str(), c.rope_theta, c.rope_scaling.factor,
                static_cast<long long>(c.rotary_dim()), static_cast<long long>(c.max_position_embeddings));
    std::printf("vocab:          %lld, tied embeddings: %s\n", static_cast<long long>(c.vocab_size),
                c.tie_word_embeddings ? "yes" : "no");
    std::printf("graph:          %zu nodes, %zu parameters\n", model->step_graph()->nodes().size(),
                model->step_graph()->parameters().size());
  });
}

}  // namespace loom::cli
