// `loom cache`: the entries of loom's cache directory (core/cache_dir.h) of both
// kinds, weights made at load (quantized with --quantize, or converted from a GGUF's
// layout) and weights packed into the kernels' layouts, with their sizes, last use
// and the checkpoints they came from; `loom cache clear` removes them (or, with
// --missing, those that can never be used again: source gone or changed, cut short).
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "loom/core/status.h"
#include "loom/core/cache_dir.h"
#include "loom/runtime/packed_weights_cache.h"

namespace loom::cli {

namespace {

struct CacheArgs {
  bool missing_only = false;
};

std::string size_text(uint64_t bytes) {
  char buf[32];
  if (bytes < 1000000000) std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  else std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

std::string entries_text(size_t n) { return std::to_string(n) + (n == 1 ? " entry" : " entries"); }

std::string cache_dir_or_explain() {
  const std::string dir = cache_dir();
  if (dir.empty()) {
    std::printf("no cache directory: LOOM_CACHE_DIR is off (or neither XDG_CACHE_HOME nor HOME is set)\n");
  }
  return dir;
}

std::string local_time(int64_t seconds) {
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm {};
  char buf[32];
  localtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

void run_list() {
  const std::string dir = cache_dir_or_explain();
  if (dir.empty()) return;
  const std::vector<CacheEntryInfo> entries = list_cache_entries(dir);
  std::printf("cache directory: %s (LOOM_CACHE_DIR chooses another; `loom cache clear` empties it)\n", dir.c_str());
  if (entries.empty()) {
    std::printf("no cached weights\n");
    return;
  }
  std::printf("\n| entry | kind | size | last use | made from | weights |\n|---|---|---:|---|---|---|\n");
  uint64_t total = 0;
  for (const CacheEntryInfo& e : entries) {
    total += e.bytes;
    const std::string from = e.problem.empty() ? e.source : e.source + " (" + e.problem + ")";
    std::string what = e.what.empty() ? "-" : e.what;
    if (e.kind == "packed") what += " (" + std::to_string(runtime::packed_weights_in(e)) + " matrices)";
    std::printf("| %s | %s | %s | %s | %s | %s |\n", e.name.c_str(), e.kind.empty() ? "?" : e.kind.c_str(),
                size_text(e.bytes).c_str(), local_time(e.last_use).c_str(), from.c_str(), what.c_str());
  }
  std::printf("\n%s, %s\n", entries_text(entries.size()).c_str(), size_text(total).c_str());
}

void run_clear(const CacheArgs& a) {
  const std::string dir = cache_dir_or_explain();
  if (dir.empty()) return;
  uint64_t freed = 0;
  size_t removed = 0;
  // With --missing, again while entries go: a packing of weights made at load can be
  // used no more once the entry it was packed from is gone.
  for (bool again = true; again;) {
    again = false;
    for (const CacheEntryInfo& e : list_cache_entries(dir)) {
      if (a.missing_only && e.problem.empty()) continue;
      std::string why;
      if (!remove_cache_entry(e, &why)) {
        std::fprintf(stderr, "loom cache clear: cannot remove %s: %s\n", e.name.c_str(), why.c_str());
        continue;
      }
      freed += e.bytes;
      ++removed;
      again = a.missing_only;
    }
  }
  std::printf("removed %s from %s, %s\n", entries_text(removed).c_str(), dir.c_str(), size_text(freed).c_str());
}

}  // namespace

void add_cache_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("cache", "List or clear the weights loom caches (quantized, converted or packed at load)");
  cmd->require_subcommand(0, 1);
  auto* list = cmd->add_subcommand("list", "List the cache's entries: kind, size, last use, checkpoint (the default)");
  auto* clear = cmd->add_subcommand("clear", "Remove the cache's entries (later loads make them again)");
  auto a = std::make_shared<CacheArgs>();
  clear->add_flag("--missing", a->missing_only,
                  "Only the entries that can never be used again: checkpoint gone or changed, a write cut short");
  list->callback([] { run_list(); });
  clear->callback([a] { run_clear(*a); });
  cmd->callback([cmd] {
    if (cmd->get_subcommands().empty()) run_list();
  });
}

}  // namespace loom::cli
