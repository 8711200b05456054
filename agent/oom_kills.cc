#include "agent/oom_kills.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_contents.h"

namespace ringmaster::agent {
namespace {

// `root` with no trailing '/', so that "/" joins as "".
std::string Base(const std::string& root) { return std::string(absl::StripSuffix(root, "/")); }

// "" when it cannot be read (a counter that is not there).
std::string ReadAll(const std::string& path) { return ReadFileContents(path).value_or(""); }

// The value of the "oom_kill N" line of a counters file, if it has one.
std::optional<int64_t> OomKillLine(const std::string& path) {
  for (absl::string_view line : absl::StrSplit(ReadAll(path), '\n')) {
    int64_t n = 0;
    if (absl::ConsumePrefix(&line, "oom_kill ") && absl::SimpleAtoi(line, &n)) return n;
  }
  return std::nullopt;
}

bool IsFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

// Where cgroup `path` (as /proc/PID/cgroup names it) is under ROOT: through the cgroup file
// system's mount in /proc/PID/mountinfo (v1: type "cgroup" with the "memory" option; v2:
// "cgroup2"), whose mount root may be a prefix of the path (a container without a cgroup
// namespace sees its own cgroup as its mount's root); without mountinfo, the usual mount point.
std::string CgroupDir(const std::string& base, const std::string& pid, bool v1,
                      const std::string& path) {
  for (absl::string_view line :
       absl::StrSplit(ReadAll(absl::StrCat(base, "/proc/", pid, "/mountinfo")), '\n')) {
    // "ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER_OPTIONS"
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
    auto dash = std::find(fields.begin(), fields.end(), "-");
    if (fields.size() < 5 || fields.end() - dash < 4) continue;
    const absl::string_view type = dash[1];
    bool memory = false;
    for (absl::string_view option : absl::StrSplit(dash[3], ',')) memory |= option == "memory";
    if (v1 ? type != "cgroup" || !memory : type != "cgroup2") continue;
    const std::string mount_root = fields[3] == "/" ? "" : std::string(fields[3]);
    if (path != mount_root && !absl::StartsWith(path, mount_root + "/")) continue;
    return absl::StrCat(base, fields[4], path.substr(mount_root.size()));
  }
  return absl::StrCat(base, v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup", path);
}

}  // namespace

std::string OomKillCounterFile(const std::string& root, const std::string& pid) {
  const std::string base = Base(root);
  std::optional<std::string> v1, v2;
  // Lines "ID:CONTROLLERS:PATH"; the path may hold ':' itself.
  for (absl::string_view line :
       absl::StrSplit(ReadAll(absl::StrCat(base, "/proc/", pid, "/cgroup")), '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3 || !absl::StartsWith(fields[2], "/")) continue;
    const std::string path = fields[2] == "/" ? "" : std::string(fields[2]);
    if (fields[0] == "0" && fields[1].empty()) v2 = path;
    for (absl::string_view controller : absl::StrSplit(fields[1], ',')) {
      if (controller == "memory") v1 = path;
    }
  }
  if (!v1.has_value() && !v2.has_value()) return "";
  const std::string file =
      v1.has_value() ? absl::StrCat(CgroupDir(base, pid, true, *v1), "/memory.oom_control")
                     : absl::StrCat(CgroupDir(base, pid, false, *v2), "/memory.events");
  return IsFile(file) ? file : "";
}

OomKillCounts ReadOomKillCounts(const std::string& root, const std::string& cgroup_file) {
  OomKillCounts counts;
  counts.cgroup_file = cgroup_file;
  if (!cgroup_file.empty()) counts.cgroup = OomKillLine(cgroup_file);
  counts.node = OomKillLine(absl::StrCat(Base(root), "/proc/vmstat"));
  return counts;
}

OomKillWatch::OomKillWatch(std::string root, Clock* clock, absl::Duration window)
    : root_(std::move(root)), clock_(clock), window_(window) {
  Sample();
}

OomKillCounts OomKillWatch::Read() {
  const std::string lines = ReadAll(absl::StrCat(Base(root_), "/proc/self/cgroup"));
  std::string file;
  {
    absl::MutexLock lock(&locate_mu_);
    if (lines != located_for_ || counter_file_.empty()) {
      counter_file_ = OomKillCounterFile(root_, "self");
      located_for_ = lines;
    }
    file = counter_file_;
  }
  return ReadOomKillCounts(root_, file);
}

void OomKillWatch::Sample() {
  OomKillCounts counts = Read();
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  samples_.emplace_back(now, counts);
  // Keep one sample at least `window` old: the baseline an exit compares with.
  while (samples_.size() > 1 && samples_[1].first <= now - window_) samples_.pop_front();
}

std::string OomKillWatch::RecentKills() {
  const OomKillCounts now = Read();
  absl::MutexLock lock(&mu_);
  // The cgroup's count when it can be compared: the oldest sample kept of the cgroup read now
  // (the agent may have moved). The kernel counts every OOM kill of a process in its cgroup, a
  // node-wide one too, so the node's count is for when the cgroup's is not there.
  const std::pair<absl::Time, OomKillCounts>* base = nullptr;
  for (const auto& sample : samples_) {
    if (sample.second.cgroup_file == now.cgroup_file && sample.second.cgroup.has_value()) {
      base = &sample;
      break;
    }
  }
  std::string where = "in the workers' memory cgroup";
  std::pair<std::string, int64_t>* claimed = &cgroup_claimed_;
  std::string counter = now.cgroup_file;
  std::optional<int64_t> before = base != nullptr ? base->second.cgroup : std::nullopt;
  std::optional<int64_t> after = now.cgroup;
  if (base == nullptr || !after.has_value()) {
    base = &samples_.front();  // the constructor took one
    where = "on this node";
    claimed = &node_claimed_;
    counter = "/proc/vmstat";
    before = base->second.node;
    after = now.node;
  }
  if (!before.has_value() || !after.has_value()) return "";
  // Kills an earlier exit was told of are not told again: one kill, one exit (the first).
  int64_t from = *before;
  if (claimed->first == counter) from = std::max(from, claimed->second);
  const int64_t killed = *after - from;
  if (killed <= 0) return "";
  *claimed = {counter, from + 1};
  return absl::StrFormat(
      "likely out of memory (the kernel's OOM killer killed %d process%s %s in the %.1f s before)",
      killed, killed == 1 ? "" : "es", where, absl::ToDoubleSeconds(clock_->Now() - base->first));
}

}  // namespace ringmaster::agent
