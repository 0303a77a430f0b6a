#include "core/log.h"

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace h3 {

namespace {

constexpr int kUnset = -1;
std::atomic<int> g_level{kUnset};

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}
LogSink& sink() {
  static LogSink s;
  return s;
}

std::chrono::steady_clock::time_point start_time() {
  static const auto t0 = std::chrono::steady_clock::now();
  return t0;
}

int level_from_env() {
  // Warnings and errors by default: a library should be quiet unless asked.
  LogLevel level = LogLevel::kWarn;
  if (const char* env = std::getenv("H3_LOG_LEVEL")) {
    if (!parse_log_level(env, &level)) {
      std::fprintf(
          stderr,
          "[h3 W] H3_LOG_LEVEL='%s' is not one of error, warn, info, debug, 0-3; using warn\n",
          env);
      level = LogLevel::kWarn;
    }
  }
  return static_cast<int>(level);
}

}  // namespace

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}

bool parse_log_level(std::string_view text, LogLevel* out) {
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "error" || t == "0") {
    *out = LogLevel::kError;
  } else if (t == "warn" || t == "warning" || t == "1") {
    *out = LogLevel::kWarn;
  } else if (t == "info" || t == "2") {
    *out = LogLevel::kInfo;
  } else if (t == "debug" || t == "3") {
    *out = LogLevel::kDebug;
  } else {
    return false;
  }
  return true;
}

LogLevel log_level() {
  int v = g_level.load(std::memory_order_relaxed);
  if (v == kUnset) {
    int expected = kUnset;
    g_level.compare_exchange_strong(expected, level_from_env());
    v = g_level.load(std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(v);
}

void set_log_level(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

void log_message(LogLevel level, const std::string& message) {
  static const char kLetters[] = {'E', 'W', 'I', 'D'};
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time()).count();
  char prefix[48];
  std::snprintf(prefix, sizeof(prefix), "[h3 %c +%.3fs] ", kLetters[static_cast<int>(level) & 3],
                secs);
  const std::string line = prefix + message;
  // One lock around the whole write so lines from different threads never interleave.
  std::lock_guard<std::mutex> lock(sink_mutex());
  if (sink()) {
    sink()(level, line);
    return;
  }
  std::fputs(line.c_str(), stderr);
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

void set_log_sink(LogSink s) {
  std::lock_guard<std::mutex> lock(sink_mutex());
  sink() = std::move(s);
}

}  // namespace h3
