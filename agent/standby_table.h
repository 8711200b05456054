// Which standby processes (worker_launcher.h: started ahead of a launch while this node is a hot
// spare, docs/agent.md) the agent holds for which job, and which of them a launch may use. Pure
// bookkeeping: nothing here starts, signals or waits for a process; the agent does, under its
// own lock.
//
// Matching: a launch of job J whose worker argv is A may use the standbys listed for J with argv
// A, one per rank, oldest first; every other standby of J is of no use to it (a different
// program) and the agent stops it (DropJob after the launch).
//
// Threading: thread-compatible; the agent guards its one StandbyTable with its own mutex.
// Ownership: holds pids only. Errors: none.
#ifndef RINGMASTER_AGENT_STANDBY_TABLE_H_
#define RINGMASTER_AGENT_STANDBY_TABLE_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace ringmaster::agent {

class StandbyTable {
 public:
  // Lists the standby `pid`, started for `job_id` with the worker argv `argv` (without the
  // standby's own flag).
  void Add(const std::string& job_id, const std::vector<std::string>& argv, pid_t pid);
  // How many standbys of `job_id` with `argv` are listed.
  int Count(const std::string& job_id, const std::vector<std::string>& argv) const;
  // Removes and returns the oldest standby of `job_id` with `argv`; 0 if there is none.
  pid_t Take(const std::string& job_id, const std::vector<std::string>& argv);
  // Removes and returns the standbys of `job_id` whose argv is not `argv`.
  std::vector<pid_t> DropOthers(const std::string& job_id, const std::vector<std::string>& argv);
  // Removes and returns every standby of `job_id`.
  std::vector<pid_t> DropJob(const std::string& job_id);
  // Removes and returns every standby.
  std::vector<pid_t> DropAll();
  // Forgets the standbys not in `alive` (those that ended by themselves).
  void KeepOnly(const std::vector<pid_t>& alive);
  // Every standby listed, as (job id, pid), by job.
  std::vector<std::pair<std::string, pid_t>> All() const;

 private:
  struct Entry {
    std::vector<std::string> argv;
    pid_t pid = 0;
  };
  std::map<std::string, std::vector<Entry>> jobs_;  // by job id, oldest first
};

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_STANDBY_TABLE_H_
