// Human-readable output of ringctl: tables and descriptions. Pure functions of protos.
#ifndef RINGMASTER_CTL_FORMAT_H_
#define RINGMASTER_CTL_FORMAT_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/job_state.h"
#include "proto/ringmaster/v1/coordinator.pb.h"

namespace ringmaster::ctl {

// Columns ID NAME STATE GEN RESTARTS STEP AGE REASON; ages relative to `now`. `wide` (-o wide)
// adds OWNER NODES DEVICES LAYOUT LOSS TOKENS/S: the nodes of the placement (comma-separated),
// the shape asked for (NODESxDEVICES), the layout (TP1,PP1,DP2), and "-" for no value. The
// columns and their order are a stable interface (docs/ringctl.md).
std::string FormatJobTable(const std::vector<v1::JobStatus>& jobs, absl::Time now,
                           bool wide = false);

// The "Links" section of describe: a link check's kinds of link (median, lowest) and the links it
// named, slow or corrupting.
std::string DescribeLinkCheck(const v1::LinkCheckSummary& check);

// Everything about one job: spec summary, planner reasoning, placement, groups, events.
std::string DescribeJob(const v1::GetJobResponse& job);

// The planner's choice with its numbers and reasons, and the placement it would get.
std::string FormatPlan(const v1::PlanJobResponse& plan);

// Columns NAME KIND DEVICES IN-USE ALIVE HEARTBEAT SCHEDULING JOBS, then one line per cordoned
// node: since when, by whom and why. `wide` (-o wide) adds CORDONED-BY and REASON columns
// instead of those lines ("-" for none). A live node settling after repeated losses (flap
// damping) is SETTLING, with a line (also with `wide`) saying its losses and how long it has
// left. Stable columns (docs/ringctl.md).
std::string FormatNodes(const std::vector<v1::NodeStatus>& nodes, absl::Time now,
                        bool wide = false);
// What `ringctl cordon|drain|uncordon` did.
std::string FormatNodeUpdate(v1::NodeAction action, const v1::UpdateNodeResponse& response);

// One line per event: "2026-11-22T23:40:01Z  gen 2  state  RUNNING: placed 4 ranks ...".
std::string FormatEvent(const v1::JobEvent& event);

// One line of live progress: "step 120  loss 3.41  tokens/s 5120  step 0.21s  ckpt 100".
std::string FormatProgress(const v1::JobProgress& progress);

// Left-aligned columns separated by two spaces, one line per row.
std::string Table(const std::vector<std::vector<std::string>>& rows);

// Byte counts as "1.5 GiB".
std::string HumanBytes(int64_t bytes);

}  // namespace ringmaster::ctl

#endif  // RINGMASTER_CTL_FORMAT_H_
