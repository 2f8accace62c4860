#include <cstdio>

#include "cli/commands.h"

namespace loom::cli {

void add_version_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("version", "Print loom's version");
  cmd->callback([] { std::printf("loom %s\n", LOOM_VERSION); });
}

}  // namespace loom::cli
