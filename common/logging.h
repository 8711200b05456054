// Logging convention shared by all Ringmaster binaries.
//
// RM_LOG(INFO) << "text";  writes one line to stderr:
//   I1122 23:40:01.123456 12345 file.cc:42] text
// (severity letter, month-day, local time with microseconds, thread id, source location).
// Each line is written with one write(2), so lines from many threads never interleave.
// Lines below the minimum severity (flag --log_level, default INFO) cost one comparison.
// RM_LOG(FATAL) is for programmer errors only: it logs and aborts. Errors otherwise go up as
// Status.
#ifndef RINGMASTER_COMMON_LOGGING_H_
#define RINGMASTER_COMMON_LOGGING_H_

#include <sstream>
#include <string>

#include "absl/strings/string_view.h"

namespace ringmaster {

enum class LogSeverity { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

// Minimum severity that is written. Thread-safe.
void SetMinLogSeverity(LogSeverity severity);
LogSeverity MinLogSeverity();

// Parses "debug", "info", "warning", "error" (case-insensitive). Returns false if unknown.
bool ParseLogSeverity(absl::string_view text, LogSeverity* out);

namespace logging_internal {

// Collects one line and writes it on destruction.
class LogLine {
 public:
  LogLine(LogSeverity severity, const char* file, int line);
  ~LogLine();
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Makes `cond ? (void)0 : Voidify() & stream` well-formed.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace logging_internal
}  // namespace ringmaster

#define RM_LOG_SEVERITY_DEBUG ::ringmaster::LogSeverity::kDebug
#define RM_LOG_SEVERITY_INFO ::ringmaster::LogSeverity::kInfo
#define RM_LOG_SEVERITY_WARNING ::ringmaster::LogSeverity::kWarning
#define RM_LOG_SEVERITY_ERROR ::ringmaster::LogSeverity::kError
#define RM_LOG_SEVERITY_FATAL ::ringmaster::LogSeverity::kFatal

#define RM_LOG(severity)                                                                  \
  (RM_LOG_SEVERITY_##severity < ::ringmaster::MinLogSeverity() &&                         \
   RM_LOG_SEVERITY_##severity != ::ringmaster::LogSeverity::kFatal)                       \
      ? (void)0                                                                           \
      : ::ringmaster::logging_internal::Voidify() &                                       \
            ::ringmaster::logging_internal::LogLine(RM_LOG_SEVERITY_##severity, __FILE__, \
                                                    __LINE__)                             \
                .stream()

// Aborts with a message when a programmer's invariant does not hold.
#define RM_CHECK(cond) (cond) ? (void)0 : RM_LOG(FATAL) << "Check failed: " #cond " "

#endif  // RINGMASTER_COMMON_LOGGING_H_
