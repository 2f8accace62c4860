// Minimal leveled logging to stderr. LOOM_LOG_LEVEL=debug|info|warn|error|off.
#pragma once

#include <string>

namespace loom {

enum class LogLevel { kDebug = 0, kInfo, kWarn, kError, kOff };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_message(LogLevel level, const std::string& message);

inline void log_debug(const std::string& m) { log_message(LogLevel::kDebug, m); }
inline void log_info(const std::string& m) { log_message(LogLevel::kInfo, m); }
inline void log_warn(const std::string& m) { log_message(LogLevel::kWarn, m); }
inline void log_error(const std::string& m) { log_message(LogLevel::kError, m); }

}  // namespace loom
