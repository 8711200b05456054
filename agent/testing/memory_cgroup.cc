#include "agent/testing/memory_cgroup.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/oom_kills.h"

namespace ringmaster::agent {
namespace {

// Writes `text` to a cgroup control file in one write, as the kernel wants.
bool WriteControl(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return out.good();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MemoryCgroup>> MemoryCgroup::Make(const std::string& name,
                                                                 int64_t limit_bytes) {
  const std::filesystem::path own = OomKillCounterFile("/", "self");
  if (own.empty()) {
    return absl::FailedPreconditionError("this process has no memory cgroup counter");
  }
  const std::string parent = own.parent_path().string();
  const std::string counter = own.filename().string();
  const std::string dir = absl::StrCat(parent, "/", name, "-", getpid());
  std::error_code ec;
  if (!std::filesystem::create_directory(dir, ec) || ec) {
    return absl::FailedPreconditionError(absl::StrCat("cannot make ", dir, ": ", ec.message()));
  }
  auto cgroup = std::unique_ptr<MemoryCgroup>(new MemoryCgroup(parent, dir, counter));
  const std::string limit =
      counter == "memory.oom_control" ? "memory.limit_in_bytes" : "memory.max";
  if (!WriteControl(absl::StrCat(dir, "/", limit), absl::StrCat(limit_bytes))) {
    return absl::FailedPreconditionError(absl::StrCat("cannot limit ", dir, "'s memory"));
  }
  return cgroup;
}

absl::Status MemoryCgroup::Join(pid_t pid) {
  if (!WriteControl(dir_ + "/cgroup.procs", absl::StrCat(pid))) {
    return absl::FailedPreconditionError(absl::StrCat("cannot move ", pid, " into ", dir_));
  }
  return absl::OkStatus();
}

MemoryCgroup::~MemoryCgroup() {
  std::ifstream in(dir_ + "/cgroup.procs");
  std::stringstream procs;
  procs << in.rdbuf();
  for (absl::string_view line : absl::StrSplit(procs.str(), '\n', absl::SkipEmpty())) {
    WriteControl(parent_ + "/cgroup.procs", std::string(line));
  }
  rmdir(dir_.c_str());
}

}  // namespace ringmaster::agent
