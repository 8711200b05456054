// ringctl's commands. Each returns OK or a one-line error; output goes to `out`.
#ifndef RINGMASTER_CTL_COMMANDS_H_
#define RINGMASTER_CTL_COMMANDS_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "ctl/client.h"

namespace ringmaster::ctl {

// Marks a status as the user's input to fix (a bad or unreadable job file): ringctl exits 2.
absl::Status InputError(absl::Status status);
bool IsInputError(const absl::Status& status);

// submit -f FILE [--wait]: with `wait`, streams events as Watch does (with `live`, its live
// block) until the job ends and fails unless it SUCCEEDED.
absl::Status Submit(const Client& client, const std::string& file, bool wait,
                    const std::string& request_id, std::ostream& out, bool live = false);
// The -o formats: table, wide, json, yaml. An input error naming -o for another.
absl::Status CheckOutputFormat(const std::string& output);

// get jobs [--state LIST] [-o FORMAT]: every job, newest first, fetched page by page; `states`
// is a comma-separated list of states to show (case-insensitive; empty: all), an input error
// naming --state when a name is not a state. json/yaml print a ListJobsResponse of them all.
absl::Status GetJobs(const Client& client, const std::string& states, std::ostream& out,
                     const std::string& output = "table");
// get job ID [-o FORMAT]: json and yaml print the GetJobResponse with every field, zeros included.
absl::Status GetJob(const Client& client, const std::string& id, const std::string& output,
                    std::ostream& out);
// describe job ID
absl::Status Describe(const Client& client, const std::string& id, std::ostream& out);
// cancel ID: a job that already ended is not cancelled: OK (with a note) if it was cancelled
// before, FAILED_PRECONDITION naming its state otherwise.
absl::Status Cancel(const Client& client, const std::string& id, const std::string& reason,
                    std::ostream& out);
// check-links ID: asks the running job's ranks for a link check. With `wait`, polls the job until
// the first check to complete after the request has its verdict (a "link check after step N"
// event), prints it with its Links section (while it is still the job's latest check), and
// returns FAILED_PRECONDITION if it names a slow or corrupting link, DEADLINE_EXCEEDED after
// `timeout` (the job's program may not run the check: only the builtin trainer does), ABORTED if
// the job leaves its generation first.
absl::Status CheckLinks(const Client& client, const std::string& id, bool wait,
                        absl::Duration timeout, std::ostream& out);
// watch ID: events and live progress until the job ends (or the stream breaks). A watch the
// coordinator cuts for falling behind (RESOURCE_EXHAUSTED) is watched again after the last event
// printed: each event is printed once, in order. With `live` (`out` is a terminal), a status
// block (ctl/live_block.h) stays under the events, redrawn in place, and ends showing the final
// state; without, one plain line per event and per progress change.
absl::Status Watch(const Client& client, const std::string& id, std::ostream& out,
                   bool live = false);
// top ID [--interval S] [-n N]: the job's per-rank table (ctl/live_block.h RenderTop) every
// `interval` until the job ends (then its final state, with the ranks as last seen) or after
// `iterations` tables (0: no limit). With `live`, each table replaces the screen (clear and
// redraw, lines cut to `width`); without, the tables follow one another, a blank line apart.
absl::Status Top(const Client& client, const std::string& id, absl::Duration interval,
                 int iterations, bool live, int width, std::ostream& out);
// logs ID [--rank N] [--follow]: the rank's stdout and stderr, read through the coordinator;
// with rank < 0, every rank's, each line prefixed "[rank N] " (with `follow`, ranks read at once,
// whole lines interleaved). FAILED_PRECONDITION saying what to do for a job with no ranks placed
// (pending), INVALID_ARGUMENT naming --rank for a rank the job does not have.
absl::Status Logs(const Client& client, const std::string& id, int rank, bool follow,
                  std::ostream& out);
// nodes [-o FORMAT]
absl::Status Nodes(const Client& client, std::ostream& out, const std::string& output = "table");
// cordon|drain|uncordon NODE [--reason TEXT]
absl::Status UpdateNode(const Client& client, const std::string& node, v1::NodeAction action,
                        const std::string& reason, std::ostream& out);
// release-node NODE: frees the node name from the agent identity that holds it (admin).
absl::Status ReleaseNode(const Client& client, const std::string& node, std::ostream& out);
// plan -f FILE
absl::Status Plan(const Client& client, const std::string& file, std::ostream& out);

}  // namespace ringmaster::ctl

#endif  // RINGMASTER_CTL_COMMANDS_H_
