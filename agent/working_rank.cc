#include "agent/working_rank.h"

#include <algorithm>
#include <cstdint>

namespace ringmaster::agent {

bool WaitsOnPeers(const v1::ReportCollectivesRequest& report) {
  return report.blocked() ||
         std::any_of(report.collective_entered().begin(), report.collective_entered().end(),
                     [&report](const auto& entered) {
                       auto completed = report.collective_completed().find(entered.first);
                       const int64_t done =
                           completed == report.collective_completed().end() ? 0 : completed->second;
                       return entered.second > done;
                     });
}

bool StackOnly(const v1::ReportCollectivesRequest& report) {
  return !report.watch_ended() && !report.blocked_known() && !report.blocked() &&
         report.collective_entered().empty() && report.collective_completed().empty();
}

void WorkingRank::Heard(absl::Time now, const v1::ReportCollectivesRequest& report) {
  latest_ = now;
  outside_ = report.blocked_known() && !WaitsOnPeers(report);
  const double cpu = report.thread_cpu_seconds();
  if (cpu <= 0 || (!cpu_.empty() && cpu < cpu_.back().second)) {
    cpu_.clear();  // unknown, or another process's thread (the class comment)
    if (cpu <= 0) return;
  }
  cpu_.emplace_back(now, cpu);
  while (cpu_.size() > 1 && now - cpu_.front().first > kWindow) cpu_.pop_front();
}

void WorkingRank::Reset() { *this = WorkingRank(); }

bool WorkingRank::Working(absl::Time now) const {
  if (!outside_ || now - latest_ > kStale || cpu_.size() < 2 || cpu_.back().first != latest_) {
    return false;
  }
  const absl::Duration span = cpu_.back().first - cpu_.front().first;
  if (span < kMinSpan) return false;
  return cpu_.back().second - cpu_.front().second >=
         kMinCpuShare * absl::ToDoubleSeconds(span);
}

}  // namespace ringmaster::agent
