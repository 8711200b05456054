#include "agent/oom_kills.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ringmaster::agent {
namespace {

// `root` with no trailing '/', so that "/" joins as "".
std::string Base(const std::string& root) { return std::string(absl::StripSuffix(root, "/")); }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

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
  if (v1.has_value()) {
    const std::string file =
        absl::StrCat(base, "/sys/fs/cgroup/memory", *v1, "/memory.oom_control");
    return IsFile(file) ? file : "";
  }
  if (v2.has_value()) {
    const std::string file = absl::StrCat(base, "/sys/fs/cgroup", *v2, "/memory.events");
    return IsFile(file) ? file : "";
  }
  return "";
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

OomKillCounts OomKillWatch::Read() const {
  return ReadOomKillCounts(root_, OomKillCounterFile(root_, "self"));
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
