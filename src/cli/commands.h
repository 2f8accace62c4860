// Each `loom <command>` lives in its own cmd_<name>.cc and adds itself to the app
// through one of these functions, called from main.cc.
#pragma once

#include <CLI/CLI.hpp>

namespace loom::cli {

void add_version_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);  // tokenize + detokenize
void add_inspect_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_batch_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_kernels_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_cache_command(CLI::App& app);  // list + clear

}  // namespace loom::cli
