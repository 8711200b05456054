// Keeps the workers' logs on a node within a disk budget.
//
// The agent writes WORK_DIR/logs/JOB/GENERATION/rank-R.log (and its rotated rank-R.log.1); each
// worker's share is bounded (WorkerSpec::max_log_bytes), but the generations of every job that
// ever ran here are not. PruneLogs() removes whole generation directories, least recently written
// first, until the rest fits the budget, and never one whose workers still run here: the logs of
// what just failed (what `ringctl logs` is asked for at 3 AM) are the last to go. A job directory
// left empty is removed too.
//
// Pure filesystem work with no state; the caller serialises calls for one directory.
#ifndef RINGMASTER_AGENT_LOG_RETENTION_H_
#define RINGMASTER_AGENT_LOG_RETENTION_H_

#include <cstdint>
#include <set>
#include <string>
#include <utility>

namespace ringmaster::agent {

struct LogPruneResult {
  int generations_removed = 0;
  int64_t bytes_removed = 0;
  int64_t bytes_kept = 0;  // what the logs hold afterwards
};

// Prunes `logs_dir` (WORK_DIR/logs) down to `budget_bytes` (0: no budget, nothing is removed).
// `live` lists the (job id, generation directory name) pairs to keep whatever their size (their
// directories may not exist yet; a job with a live generation keeps its directory). Entries
// that are not directories, and files it cannot stat or remove, are skipped (logged); a missing
// `logs_dir` is empty.
LogPruneResult PruneLogs(const std::string& logs_dir, int64_t budget_bytes,
                         const std::set<std::pair<std::string, std::string>>& live);

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_LOG_RETENTION_H_
