#include "common/logging.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/enum_name.h"

namespace ringmaster {
namespace {

std::atomic<int> g_min_severity{static_cast<int>(LogSeverity::kInfo)};

char SeverityLetter(LogSeverity severity) {
  static constexpr std::pair<LogSeverity, char> kNames[] = {{LogSeverity::kDebug, 'D'},
                                                            {LogSeverity::kInfo, 'I'},
                                                            {LogSeverity::kWarning, 'W'},
                                                            {LogSeverity::kError, 'E'},
                                                            {LogSeverity::kFatal, 'F'}};
  return EnumName(kNames, severity, '?');
}

absl::string_view Basename(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

void SetMinLogSeverity(LogSeverity severity) {
  g_min_severity.store(static_cast<int>(severity), std::memory_order_relaxed);
}

LogSeverity MinLogSeverity() {
  return static_cast<LogSeverity>(g_min_severity.load(std::memory_order_relaxed));
}

bool ParseLogSeverity(absl::string_view text, LogSeverity* out) {
  std::string lower = absl::AsciiStrToLower(text);
  if (lower == "debug") {
    *out = LogSeverity::kDebug;
  } else if (lower == "info") {
    *out = LogSeverity::kInfo;
  } else if (lower == "warning") {
    *out = LogSeverity::kWarning;
  } else if (lower == "error") {
    *out = LogSeverity::kError;
  } else {
    return false;
  }
  return true;
}

namespace logging_internal {

LogLine::LogLine(LogSeverity severity, const char* file, int line) : severity_(severity) {
  absl::Time now = absl::Now();
  stream_ << SeverityLetter(severity)
          << absl::FormatTime("%m%d %H:%M:%E6S", now, absl::LocalTimeZone()) << ' '
          << static_cast<long>(syscall(SYS_gettid)) << ' ' << Basename(file) << ':' << line << "] ";
}

LogLine::~LogLine() {
  stream_ << '\n';
  std::string text = stream_.str();
  // One write per line keeps concurrent lines whole. A short write to stderr is ignored on
  // purpose: there is nowhere else to report it.
  ssize_t ignored = write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace logging_internal
}  // namespace ringmaster
