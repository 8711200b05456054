#include "common/file_contents.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace ringmaster {
namespace {

absl::Status Failed(int error, const std::string& what, const std::string& path) {
  return ErrnoError(error, absl::StrCat("cannot ", what, " ", path));
}

}  // namespace

absl::StatusOr<std::string> ReadFileContents(const std::string& path) {
  const UniqueFd file(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file.valid()) return Failed(errno, "open", path);
  const int fd = file.get();
  struct stat st;
  if (fstat(fd, &st) != 0) return Failed(errno, "stat", path);
  if (S_ISDIR(st.st_mode)) return Failed(EISDIR, "read", path);
  // A regular file is read into a string of its size; files whose size stat does not know
  // (/proc) into one that doubles as they go. Either way reading stops at the end of the file,
  // which a file that grew meanwhile reaches later.
  const bool sized = S_ISREG(st.st_mode) && st.st_size > 0;
  std::string data(sized ? st.st_size : 4096, '\0');
  size_t size = 0;
  for (;;) {
    if (size == data.size()) {
      // Full: at the end of the file, or more to come? Ask with a small read before growing.
      char probe[4096];
      const ssize_t n = read(fd, probe, sizeof(probe));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Failed(errno, "read", path);
      if (n == 0) break;
      data.resize(std::max(data.size() * 2, size + n));  // a small file may have grown
      std::memcpy(data.data() + size, probe, n);
      size += n;
      continue;
    }
    const ssize_t n = read(fd, data.data() + size, data.size() - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Failed(errno, "read", path);
    if (n == 0) break;
    size += n;
  }
  data.resize(size);
  return data;
}

}  // namespace ringmaster
