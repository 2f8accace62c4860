// `loom cache`: the files loom keeps in its cache directory (weights made at load:
// quantized with --quantize, or converted from a GGUF's layout; weights packed into
// the kernels' layouts), their sizes and the checkpoints they came from; `loom cache
// clear` removes them (or, with --missing, those whose checkpoint is gone).
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "loom/core/status.h"
#include "loom/core/cache_dir.h"
#include "loom/runtime/packed_weights_cache.h"
#include "loom/weights/weights_cache.h"

namespace loom::cli {

namespace {

struct CacheArgs {
  bool missing_only = false;
};

std::string gigabytes(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

std::string cache_dir_or_explain() {
  const std::string dir = cache_dir();
  if (dir.empty()) {
    std::printf("no cache directory: LOOM_CACHE_DIR is off (or neither XDG_CACHE_HOME nor HOME is set)\n");
  }
  return dir;
}

// One file of either kind, as listed and cleared.
struct CacheEntry {
  std::string path;
  uint64_t bytes = 0;
  std::string checkpoint;  // "" when unreadable
  std::string what;
  std::string problem;
  runtime::PackedWeightsFile packed;  // packed weights: removed with their index
};

std::vector<CacheEntry> list_cache(const std::string& dir) {
  std::vector<CacheEntry> out;
  for (const WeightsCacheFile& f : list_weights_cache(dir)) {
    out.push_back({f.path, f.bytes, f.checkpoint,
                   f.recipe.empty() ? "converted at load" : "quantized to " + f.recipe, f.problem, {}});
  }
  for (const runtime::PackedWeightsFile& f : runtime::list_packed_weights_cache(dir)) {
    out.push_back({f.path, f.bytes, f.checkpoint_file, "packed (" + std::to_string(f.tensors) + " matrices)",
                   f.problem, f});
  }
  return out;
}

void run_list() {
  const std::string dir = cache_dir_or_explain();
  if (dir.empty()) return;
  const auto files = list_cache(dir);
  std::printf("cache directory: %s (LOOM_CACHE_DIR chooses another; `loom cache clear` empties it)\n", dir.c_str());
  if (files.empty()) {
    std::printf("no cached weights\n");
    return;
  }
  std::printf("\n| file | size | made from | weights |\n|---|---:|---|---|\n");
  uint64_t total = 0;
  for (const CacheEntry& f : files) {
    total += f.bytes;
    const std::string name = std::filesystem::path(f.path).filename().string();
    std::string from = f.problem.empty() ? f.checkpoint : "(unreadable: " + f.problem + ")";
    std::error_code ec;
    if (f.problem.empty() && !std::filesystem::exists(f.checkpoint, ec)) from += " (gone)";
    const std::string what = f.problem.empty() ? f.what : "-";
    std::printf("| %s | %s | %s | %s |\n", name.c_str(), gigabytes(f.bytes).c_str(), from.c_str(), what.c_str());
  }
  std::printf("\n%zu file(s), %s\n", files.size(), gigabytes(total).c_str());
}

void run_clear(const CacheArgs& a) {
  const std::string dir = cache_dir_or_explain();
  if (dir.empty()) return;
  uint64_t freed = 0;
  size_t removed = 0;
  for (const CacheEntry& f : list_cache(dir)) {
    std::error_code ec;
    if (a.missing_only && f.problem.empty() && std::filesystem::exists(f.checkpoint, ec)) continue;
    std::string why;
    const bool removed_it = f.packed.path.empty()
                                ? std::filesystem::remove(f.path, ec) && !ec
                                : runtime::remove_packed_weights_file(f.packed, &why);
    if (!removed_it) {
      std::fprintf(stderr, "loom cache clear: cannot remove %s: %s\n", f.path.c_str(),
                   (why.empty() ? ec.message() : why).c_str());
      continue;
    }
    freed += f.bytes;
    ++removed;
  }
  std::printf("removed %zu file(s) from %s, %s\n", removed, dir.c_str(), gigabytes(freed).c_str());
}

}  // namespace

void add_cache_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("cache", "List or clear the weights loom caches (quantized, converted or packed at load)");
  cmd->require_subcommand(0, 1);
  auto* list = cmd->add_subcommand("list", "List the cached files, their sizes and checkpoints (the default)");
  auto* clear = cmd->add_subcommand("clear", "Remove the cached files (later loads make them again)");
  auto a = std::make_shared<CacheArgs>();
  clear->add_flag("--missing", a->missing_only,
                  "Only the files whose checkpoint is gone, or that cannot be read (a write cut short)");
  list->callback([] { run_list(); });
  clear->callback([a] { run_clear(*a); });
  cmd->callback([cmd] {
    if (cmd->get_subcommands().empty()) run_list();
  });
}

}  // namespace loom::cli
