#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace deepinfer {
namespace {
std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARN";
    case LogLevel::kError: return "ERROR";
  }
  return "?";
}
}  // namespace

void SetMinLogLevel(LogLevel level) { g_min_level.store(static_cast<int>(level)); }
LogLevel MinLogLevel() { return static_cast<LogLevel>(g_min_level.load(std::memory_order_relaxed)); }

absl::StatusOr<LogLevel> ParseLogLevel(std::string_view name) {
  std::string n = absl::AsciiStrToLower(AbslView(name));
  if (n == "debug") return LogLevel::kDebug;
  if (n == "info") return LogLevel::kInfo;
  if (n == "warning" || n == "warn") return LogLevel::kWarning;
  if (n == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log level '", AbslView(name), "' (expected debug, info, warning or error)"));
}

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  int micros = static_cast<int>(
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000);
  std::tm tm;
  gmtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  char frac[16];
  std::snprintf(frac, sizeof(frac), ".%06dZ", micros);
  stream_ << buf << frac << " " << LevelName(level) << " " << base << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  std::string line = stream_.str();
  // One write() per line: atomic with respect to other threads' lines for typical lengths.
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace internal
}  // namespace deepinfer
