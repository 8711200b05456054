#include "agent/command_queue.h"

#include "common/logging.h"

namespace ringmaster::agent {
namespace {

const std::string& JobOf(const v1::CoordinatorMessage& command) {
  if (command.has_prepare()) return command.prepare().job_id();
  return command.has_launch() ? command.launch().job().job_id() : command.stop().job().job_id();
}

}  // namespace

bool CommandQueue::Push(const v1::CoordinatorMessage& command) {
  if (!command.has_launch() && !command.has_stop() && !command.has_prepare()) return false;
  commands_.push_back(command);
  return true;
}

bool CommandQueue::HasReady() const { return NextReady() != commands_.end(); }

std::optional<v1::CoordinatorMessage> CommandQueue::TakeReady() {
  const auto ready = NextReady();
  if (ready == commands_.end()) return std::nullopt;
  auto next = commands_.begin() + (ready - commands_.cbegin());
  v1::CoordinatorMessage command = std::move(*next);
  commands_.erase(next);
  if (command.has_launch()) {
    std::vector<int>& ranks =
        launching_[{command.launch().job().job_id(), command.launch().job().generation()}];
    for (const v1::RankAssignment& a : command.launch().assignments()) ranks.push_back(a.rank());
  }
  return command;
}

void CommandQueue::LaunchDone(const v1::JobGeneration& job) {
  launching_.erase({job.job_id(), job.generation()});
}

void CommandQueue::StopStarted(const std::string& job_id, const std::vector<int>& devices) {
  ++stops_running_[job_id];
  devices_stopping_.insert(devices.begin(), devices.end());
}

void CommandQueue::StopEnded(const std::string& job_id, const std::vector<int>& devices) {
  auto it = stops_running_.find(job_id);
  RM_CHECK(it != stops_running_.end()) << "no stop of " << job_id << " started";
  if (--it->second == 0) stops_running_.erase(it);
  for (int d : devices) {
    auto device = devices_stopping_.find(d);
    RM_CHECK(device != devices_stopping_.end()) << "device " << d << " not being stopped";
    devices_stopping_.erase(device);
  }
}

bool CommandQueue::AcceptLaunch(const v1::JobGeneration& job) {
  auto it = generations_.find(job.job_id());
  if (it != generations_.end() && it->second >= job.generation()) return false;  // Repeat/stale.
  generations_[job.job_id()] = job.generation();
  return true;
}

std::optional<int64_t> CommandQueue::LatestGeneration(const std::string& job_id) const {
  auto it = generations_.find(job_id);
  if (it == generations_.end()) return std::nullopt;
  return it->second;
}

std::vector<StartingRank> CommandQueue::LaunchingRanks() const {
  std::vector<StartingRank> ranks;
  for (const auto& [launch, launch_ranks] : launching_) {
    for (int rank : launch_ranks) ranks.push_back({launch.first, launch.second, rank});
  }
  return ranks;
}

std::vector<StartingRank> CommandQueue::QueuedRanks() const {
  std::vector<StartingRank> ranks;
  for (const v1::CoordinatorMessage& command : commands_) {
    if (!command.has_launch()) continue;
    const v1::JobGeneration& job = command.launch().job();
    for (const v1::RankAssignment& a : command.launch().assignments()) {
      ranks.push_back({job.job_id(), job.generation(), a.rank()});
    }
  }
  return ranks;
}

std::deque<v1::CoordinatorMessage>::const_iterator CommandQueue::NextReady() const {
  std::set<std::string> passed;  // jobs with an earlier command still queued
  for (auto it = commands_.begin(); it != commands_.end(); ++it) {
    const std::string& job = JobOf(*it);
    if (!stops_running_.contains(job) && !passed.count(job) &&
        !(it->has_launch() && DeviceStillStopping(it->launch()))) {
      return it;
    }
    passed.insert(job);
  }
  return commands_.end();
}

bool CommandQueue::DeviceStillStopping(const v1::LaunchWorkers& launch) const {
  for (const v1::RankAssignment& a : launch.assignments()) {
    if (devices_stopping_.count(a.local_device())) return true;
  }
  return false;
}

}  // namespace ringmaster::agent
