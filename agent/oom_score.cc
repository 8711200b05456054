#include "agent/oom_score.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/file_contents.h"
#include "common/status.h"

namespace ringmaster::agent {

absl::StatusOr<int> ReadOomScoreAdj(pid_t pid) {
  const std::string path =
      pid == 0 ? "/proc/self/oom_score_adj" : absl::StrCat("/proc/", pid, "/oom_score_adj");
  ASSIGN_OR_RETURN(std::string text, ReadFileContents(path));
  int value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return absl::InternalError(absl::StrCat(path, " holds \"", text, "\", not a number"));
  }
  return value;
}

absl::Status CheckOomScoreAdj(int value) {
  if (value >= kMinOomScoreAdj && value <= kMaxOomScoreAdj) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("oom_score_adj must be in [", kMinOomScoreAdj,
                                                 ", ", kMaxOomScoreAdj, "], got ", value));
}

absl::Status SetOomScoreAdj(int value) {
  RETURN_IF_ERROR(CheckOomScoreAdj(value));
  const int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "open /proc/self/oom_score_adj");
  const std::string text = absl::StrCat(value, "\n");
  const ssize_t n = write(fd, text.data(), text.size());
  const int error = errno;
  close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return ErrnoError(n < 0 ? error : EIO, absl::StrCat("set oom_score_adj to ", value));
  }
  return absl::OkStatus();
}

}  // namespace ringmaster::agent
