// Logging: four levels to stderr, one line per message, safe to call from any thread.
//
// The level comes from the environment variable H3_LOG_LEVEL (error, warn, info, debug, or 0-3)
// the first time it is needed; set_log_level() overrides it. Messages below the level cost one
// comparison: the H3_LOG_* macros do not format their arguments unless the level is enabled.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace h3 {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

const char* log_level_name(LogLevel level);  // "error", "warn", "info", "debug"
// Parses "error" / "warn" / "warning" / "info" / "debug" (any case) or "0".."3"; false otherwise.
bool parse_log_level(std::string_view text, LogLevel* out);

LogLevel log_level();
void set_log_level(LogLevel level);
inline bool log_enabled(LogLevel level) {
  return static_cast<int>(level) <= static_cast<int>(log_level());
}

// Writes one line: "[h3 W +12.345s] message" (level letter, seconds since the first message).
void log_message(LogLevel level, const std::string& message);

// Redirects every line (already formatted, without the trailing newline) to `sink`, e.g. to
// capture messages in a test; an empty function restores stderr.
using LogSink = std::function<void(LogLevel level, const std::string& line)>;
void set_log_sink(LogSink sink);

}  // namespace h3

#define H3_LOG(level, ...)                                                                \
  do {                                                                                    \
    if (::h3::log_enabled(level)) ::h3::log_message((level), ::h3::str_cat(__VA_ARGS__)); \
  } while (0)
#define H3_LOG_ERROR(...) H3_LOG(::h3::LogLevel::kError, __VA_ARGS__)
#define H3_LOG_WARN(...) H3_LOG(::h3::LogLevel::kWarn, __VA_ARGS__)
#define H3_LOG_INFO(...) H3_LOG(::h3::LogLevel::kInfo, __VA_ARGS__)
#define H3_LOG_DEBUG(...) H3_LOG(::h3::LogLevel::kDebug, __VA_ARGS__)
