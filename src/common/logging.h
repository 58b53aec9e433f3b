// Logging: one line per event, "<UTC timestamp> <LEVEL> <file:line>] message", written to
// stderr with a single write() so lines from different threads never interleave.
//
//   LOG(INFO) << "loaded " << n << " tensors";
//   LOG(WARNING) << ...;  LOG(ERROR) << ...;  VLOG(1) << ...   (VLOG: DEBUG level)
// The minimum level comes from SetMinLogLevel() (set from config at start-up); default INFO.
// Thread-safe.
#ifndef DEEPINFER_COMMON_LOGGING_H_
#define DEEPINFER_COMMON_LOGGING_H_

#include <sstream>
#include <string_view>

#include "absl/status/statusor.h"

namespace deepinfer {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();
// Parses "debug" | "info" | "warning" | "error" (case-insensitive). InvalidArgument otherwise.
absl::StatusOr<LogLevel> ParseLogLevel(std::string_view name);

namespace internal {

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace internal
}  // namespace deepinfer

#define DEEPINFER_LOG_LEVEL_DEBUG ::deepinfer::LogLevel::kDebug
#define DEEPINFER_LOG_LEVEL_INFO ::deepinfer::LogLevel::kInfo
#define DEEPINFER_LOG_LEVEL_WARNING ::deepinfer::LogLevel::kWarning
#define DEEPINFER_LOG_LEVEL_ERROR ::deepinfer::LogLevel::kError

#define DEEPINFER_LOG_AT_(level)                                     \
  (static_cast<int>(level) < static_cast<int>(::deepinfer::MinLogLevel())) \
      ? (void)0                                                      \
      : ::deepinfer::internal::LogVoidify() &                        \
            ::deepinfer::internal::LogMessage(level, __FILE__, __LINE__).stream()

#define LOG(severity) DEEPINFER_LOG_AT_(DEEPINFER_LOG_LEVEL_##severity)
#define VLOG(n) DEEPINFER_LOG_AT_(::deepinfer::LogLevel::kDebug)

#endif  // DEEPINFER_COMMON_LOGGING_H_
