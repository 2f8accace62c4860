#include "loom/core/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace loom {
namespace {
LogLevel level_from_env() {
  const char* env = std::getenv("LOOM_LOG_LEVEL");
  if (!env) return LogLevel::kWarn;
  if (!std::strcmp(env, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(env, "info")) return LogLevel::kInfo;
  if (!std::strcmp(env, "error")) return LogLevel::kError;
  if (!std::strcmp(env, "off")) return LogLevel::kOff;
  return LogLevel::kWarn;
}
std::atomic<int>& level_slot() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}
}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_slot().load()); }
void set_log_level(LogLevel level) { level_slot().store(static_cast<int>(level)); }

void log_message(LogLevel level, const std::string& message) {
  if (level < log_level() || level == LogLevel::kOff) return;
  static std::mutex mu;
  static const char* names[] = {"debug", "info", "warning", "error"};
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "loom %s: %s\n", names[static_cast<int>(level)], message.c_str());
}

}  // namespace loom
