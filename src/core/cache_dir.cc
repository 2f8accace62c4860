#include "loom/core/cache_dir.h"

#include <cstdlib>
#include <filesystem>

namespace loom {

std::string cache_dir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("LOOM_CACHE_DIR"); env && *env) {
    return std::string(env) == "off" ? std::string() : std::string(env);
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return (fs::path(xdg) / "loom").string();
  if (const char* home = std::getenv("HOME"); home && *home) return (fs::path(home) / ".cache" / "loom").string();
  return std::string();
}

}  // namespace loom
