#include "agent/standby_table.h"

#include <algorithm>
#include <set>

namespace ringmaster::agent {

void StandbyTable::Add(const std::string& job_id, const std::vector<std::string>& argv,
                       pid_t pid) {
  jobs_[job_id].push_back(Entry{argv, pid});
}

int StandbyTable::Count(const std::string& job_id, const std::vector<std::string>& argv) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return 0;
  return static_cast<int>(std::count_if(it->second.begin(), it->second.end(),
                                        [&](const Entry& e) { return e.argv == argv; }));
}

pid_t StandbyTable::Take(const std::string& job_id, const std::vector<std::string>& argv) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return 0;
  std::vector<Entry>& entries = it->second;
  auto entry = std::find_if(entries.begin(), entries.end(),
                            [&](const Entry& e) { return e.argv == argv; });
  if (entry == entries.end()) return 0;
  const pid_t pid = entry->pid;
  entries.erase(entry);
  if (entries.empty()) jobs_.erase(it);
  return pid;
}

std::vector<pid_t> StandbyTable::DropOthers(const std::string& job_id,
                                            const std::vector<std::string>& argv) {
  std::vector<pid_t> dropped;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return dropped;
  std::vector<Entry>& entries = it->second;
  for (auto e = entries.begin(); e != entries.end();) {
    if (e->argv == argv) {
      ++e;
      continue;
    }
    dropped.push_back(e->pid);
    e = entries.erase(e);
  }
  if (entries.empty()) jobs_.erase(it);
  return dropped;
}

std::vector<pid_t> StandbyTable::DropJob(const std::string& job_id) {
  std::vector<pid_t> dropped;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return dropped;
  for (const Entry& e : it->second) dropped.push_back(e.pid);
  jobs_.erase(it);
  return dropped;
}

std::vector<pid_t> StandbyTable::DropAll() {
  std::vector<pid_t> dropped;
  for (const auto& [job, entries] : jobs_) {
    for (const Entry& e : entries) dropped.push_back(e.pid);
  }
  jobs_.clear();
  return dropped;
}

void StandbyTable::KeepOnly(const std::vector<pid_t>& alive) {
  const std::set<pid_t> live(alive.begin(), alive.end());
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    std::vector<Entry>& entries = it->second;
    entries.erase(std::remove_if(entries.begin(), entries.end(),
                                 [&](const Entry& e) { return !live.count(e.pid); }),
                  entries.end());
    it = entries.empty() ? jobs_.erase(it) : std::next(it);
  }
}

std::vector<std::pair<std::string, pid_t>> StandbyTable::All() const {
  std::vector<std::pair<std::string, pid_t>> all;
  for (const auto& [job, entries] : jobs_) {
    for (const Entry& e : entries) all.emplace_back(job, e.pid);
  }
  return all;
}

}  // namespace ringmaster::agent
