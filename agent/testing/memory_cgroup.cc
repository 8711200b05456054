#include "agent/testing/memory_cgroup.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
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

// Removes the empty NAME-PID cgroups under `parent` whose PID is no longer alive.
void RemoveStale(const std::string& parent, const std::string& name) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
    const std::string base = entry.path().filename().string();
    int pid = 0;
    if (absl::StartsWith(base, name + "-") &&
        absl::SimpleAtoi(base.substr(name.size() + 1), &pid) && pid > 0 && kill(pid, 0) != 0 &&
        errno == ESRCH) {
      rmdir(entry.path().c_str());  // fails, harmlessly, while processes are left in it
    }
  }
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
  RemoveStale(parent, name);
  const std::string dir = absl::StrCat(parent, "/", name, "-", getpid());
  std::error_code ec;
  if (!std::filesystem::create_directory(dir, ec) || ec) {
    return absl::FailedPreconditionError(absl::StrCat("cannot make ", dir, ": ", ec.message()));
  }
  auto cgroup = std::unique_ptr<MemoryCgroup>(new MemoryCgroup(parent, dir, counter));
  const bool v1 = counter == "memory.oom_control";
  if (!WriteControl(absl::StrCat(dir, v1 ? "/memory.limit_in_bytes" : "/memory.max"),
                    absl::StrCat(limit_bytes))) {
    return absl::FailedPreconditionError(absl::StrCat("cannot limit ", dir, "'s memory"));
  }
  // Without swap, or the limit would only move memory to swap. v1 keeps memory plus swap under
  // its own limit (the file exists only with swap accounting); v2 has a swap limit of its own.
  const std::string swap =
      absl::StrCat(dir, v1 ? "/memory.memsw.limit_in_bytes" : "/memory.swap.max");
  const bool has_swap_limit = std::filesystem::exists(swap);
  if (has_swap_limit && !WriteControl(swap, v1 ? absl::StrCat(limit_bytes) : "0")) {
    return absl::FailedPreconditionError(absl::StrCat("cannot limit ", dir, "'s swap"));
  }
  if (!has_swap_limit) {
    std::ifstream swaps("/proc/swaps");
    std::string header, device;
    std::getline(swaps, header);
    if (swaps >> device) {
      return absl::FailedPreconditionError(
          absl::StrCat("swap is on and ", dir, " has no swap limit (", swap, ")"));
    }
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
  if (rmdir(dir_.c_str()) != 0) {
    std::fprintf(stderr, "memory_cgroup: cannot remove %s: %s\n", dir_.c_str(),
                 std::strerror(errno));
  }
}

}  // namespace ringmaster::agent
