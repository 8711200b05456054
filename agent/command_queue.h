// The order in which an agent carries out the coordinator's launch, stop and prepare commands
// (a prepare, PrepareWorkers, is ordered like a job's other commands), as pure
// bookkeeping: the agent's executor thread takes commands from it, and tells it when a launch is
// done and when a stop starts and ends; nothing here runs, waits or sleeps.
//
// The rules:
//  - A job's commands run in the order received, each once the job's previous stop has ended
//    (its next launch must come after it). Other jobs' commands do not wait for it, except a
//    launch onto a device whose previous worker a stop (of any job) has not removed yet.
//  - A launch counts as under way from when it is taken until LaunchDone: the agent's Register
//    lists its ranks as starting, as it did while it was queued (no moment without them), and
//    its logs are never pruned.
//  - Launch is idempotent per (job, generation): AcceptLaunch takes each job's generations in
//    increasing order only; a repeat or an older generation is refused.
//
// Threading: thread-compatible; the agent guards its one CommandQueue with its own mutex.
// Ownership: holds copies of the queued commands. Errors: none (misuse, such as StopEnded for a
// stop never started, is a programmer error and CHECK-fails).
#ifndef RINGMASTER_AGENT_COMMAND_QUEUE_H_
#define RINGMASTER_AGENT_COMMAND_QUEUE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "proto/ringmaster/v1/agent.pb.h"

namespace ringmaster::agent {

// A rank of a launch queued or under way.
struct StartingRank {
  std::string job_id;
  int64_t generation = 0;
  int rank = 0;
};

class CommandQueue {
 public:
  // Queues `command` if it is a LaunchWorkers, a StopWorkers or a PrepareWorkers (true); other
  // messages are not this queue's (false).
  bool Push(const v1::CoordinatorMessage& command);

  // Whether a queued command may run now (TakeReady would return one).
  bool HasReady() const;
  // Removes and returns the first queued command whose job has no stop running and no earlier
  // command queued, and, for a launch, none of whose devices a running stop still uses; nullopt
  // if there is none. A launch taken is under way until LaunchDone.
  std::optional<v1::CoordinatorMessage> TakeReady();
  // The launch of `job` taken by TakeReady has been carried out (or refused).
  void LaunchDone(const v1::JobGeneration& job);

  // A stop of `job_id`'s workers on `devices` (RankAssignment.local_device, repeats allowed)
  // started / ended. Until it ends, the job's commands wait and launches onto those devices do.
  void StopStarted(const std::string& job_id, const std::vector<int>& devices);
  void StopEnded(const std::string& job_id, const std::vector<int>& devices);

  // Records `job`'s generation as the latest launched and returns true when it is newer than any
  // recorded for the job; false for a repeat or a stale generation (nothing is recorded).
  bool AcceptLaunch(const v1::JobGeneration& job);
  // The latest generation AcceptLaunch recorded for `job_id`, if any.
  std::optional<int64_t> LatestGeneration(const std::string& job_id) const;

  // The ranks of the launches under way, by (job, generation), each launch's in its order.
  std::vector<StartingRank> LaunchingRanks() const;
  // The ranks of the queued launches, in queue order.
  std::vector<StartingRank> QueuedRanks() const;

 private:
  // The first command TakeReady would return, or commands_.end().
  std::deque<v1::CoordinatorMessage>::const_iterator NextReady() const;
  // Whether a running stop has not yet removed a worker on a device of `launch`.
  bool DeviceStillStopping(const v1::LaunchWorkers& launch) const;

  std::deque<v1::CoordinatorMessage> commands_;
  // Launches taken and not done, with their ranks.
  std::map<std::pair<std::string, int64_t>, std::vector<int>> launching_;
  // Stops running: how many per job, and the devices of the workers they stop.
  absl::flat_hash_map<std::string, int> stops_running_;
  std::multiset<int> devices_stopping_;
  // Latest generation launched per job.
  absl::flat_hash_map<std::string, int64_t> generations_;
};

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_COMMAND_QUEUE_H_
