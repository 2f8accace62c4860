// `loom`: the command-line front end. Errors become one line on stderr and exit 2;
// nothing here crashes on bad input.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "loom/core/status.h"

int main(int argc, char** argv) {
  CLI::App app{"loom: run Hugging Face transformer checkpoints natively on CPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("loom ") + LOOM_VERSION);
  loom::cli::add_version_command(app);
  loom::cli::add_tokenize_command(app);
  loom::cli::add_inspect_command(app);
  loom::cli::add_generate_command(app);
  loom::cli::add_bench_command(app);
  loom::cli::add_perplexity_command(app);
  loom::cli::add_chat_command(app);
  loom::cli::add_batch_command(app);
  loom::cli::add_convert_command(app);
  loom::cli::add_export_command(app);
  loom::cli::add_kernels_command(app);
  loom::cli::add_serve_command(app);
  loom::cli::add_cache_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "loom: error: %s\n", e.status().to_string().c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
