#include "agent/exit_reason.h"

#include "absl/strings/str_cat.h"
#include "common/one_line.h"

namespace ringmaster::agent {

std::string ExitReason(const ExitInfo& info, const std::optional<ExitAnnouncement>& announced,
                       const std::string& oom) {
  // A stopped worker's clean exit still says what it was doing (a hang's suspect may catch
  // SIGTERM and exit 0).
  if (info.exit_code == 0 && info.signal == 0 && !info.stopped) return "";
  std::string reason;
  if (announced.has_value() && !OneLine(announced->reason, kExitReasonBytes).empty()) {
    reason =
        info.signal == 0 && info.exit_code == announced->exit_code
            ? announced->reason
            : absl::StrCat("after announcing exit ", announced->exit_code, ": ", announced->reason);
  } else if (!info.last_line.empty()) {
    reason = absl::StrCat(info.stopped ? "last output before the stop: " : "last output: ",
                          info.last_line);
  }
  if (!oom.empty()) reason = reason.empty() ? oom : absl::StrCat(oom, ": ", reason);
  return OneLine(reason, kExitReasonBytes);
}

}  // namespace ringmaster::agent
