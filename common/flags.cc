#include "common/flags.h"

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

ABSL_FLAG(std::string, log_level, "info",
          "Minimum severity written to stderr: debug, info, warning or error.");

namespace ringmaster {

absl::Status InitBinary(int argc, char** argv, absl::string_view usage,
                        std::vector<std::string>* positional) {
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (positional != nullptr) {
    positional->assign(rest.begin(), rest.end());
  }
  LogSeverity severity;
  std::string level = absl::GetFlag(FLAGS_log_level);
  if (!ParseLogSeverity(level, &severity)) {
    return FieldError("--log_level",
                      absl::StrCat("must be debug, info, warning or error, got \"", level, "\""));
  }
  SetMinLogSeverity(severity);
  return absl::OkStatus();
}

absl::Status ParseHostPort(absl::string_view flag, absl::string_view address, std::string* host,
                           int* port) {
  size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return FieldError(flag, absl::StrCat("must be HOST:PORT, got \"", address, "\""));
  }
  absl::string_view h = address.substr(0, colon);
  if (h.front() == '[') {
    if (h.back() != ']') {
      return FieldError(flag, absl::StrCat("unbalanced brackets in \"", address, "\""));
    }
    h = h.substr(1, h.size() - 2);
  }
  int p = -1;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return FieldError(flag, absl::StrCat("port must be 0-65535, got \"", address, "\""));
  }
  *host = std::string(h);
  *port = p;
  return absl::OkStatus();
}

}  // namespace ringmaster
