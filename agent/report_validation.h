// Checks of what a worker reports through the worker API before it becomes metrics and
// summaries: any program can call the API (it is how non-builtin jobs report), and every label it
// sends becomes a Prometheus series, so names are bounded in form and number, and figures must be
// finite and in range. Pure logic.
#ifndef RINGMASTER_AGENT_REPORT_VALIDATION_H_
#define RINGMASTER_AGENT_REPORT_VALIDATION_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/ringmaster/v1/worker.pb.h"

namespace ringmaster::agent {

// Most groups (communicators) one report may name, and most collective entries it may carry.
inline constexpr int kMaxReportedGroups = 64;
inline constexpr int kMaxReportedCollectives = 6 * kMaxReportedGroups;
// Most links one link check may report (two ring neighbours per group).
inline constexpr int kMaxReportedLinks = 2 * kMaxReportedGroups;

// OK, or INVALID_ARGUMENT naming the field and the rule ("collectives[2].op: must be one of
// all_reduce, ...; got \"foo\""):
//  - step >= 1; tokens, state_bytes >= 0; the seconds, mfu and bandwidths finite and >= 0;
//    bubble_fraction in [0, 1]; the loss may be anything (a NaN loss is news, not an error);
//  - collectives: at most kMaxReportedCollectives; op one of all_reduce, reduce_scatter,
//    all_gather, broadcast, send, recv, reduce, gather, scatter, all_to_all, barrier
//    (common/collective_ops.h); group a valid group name; count, bytes >= 0;
//  - collective_entered/completed: at most kMaxReportedGroups, valid names, values >= 0.
// A valid group name is 1 to 64 characters of [A-Za-z0-9_.-]: the builtin trainer's "dp0",
// "tp1", ... and the Python watch's "world" (torch.distributed's default group) and "pg1", "pg2",
// ... (its new_group()s in creation order) alike. Link reports keep a stricter rule (below).
absl::Status ValidateStepReport(const v1::ReportStepRequest& report);
//  - links: at most kMaxReportedLinks; group a tp, pp, dp or emb group name with its number
//    (common/link_groups.h: they become the `kind` label); peer_rank >= 0; bytes > 0; seconds
//    finite and > 0; wrong >= 0; the check's seconds finite and >= 0.
absl::Status ValidateLinksReport(const v1::ReportLinksRequest& report);
//  - phase one of init, step, checkpoint, eval (STARTING and EXITED are the agent's own);
//    checkpoint_step >= 0; checkpoint_seconds finite and >= 0.
absl::Status ValidatePhaseReport(const v1::ReportPhaseRequest& report);
//  - collectives: as for a step's sequence numbers; timeout_seconds and thread_cpu_seconds
//    finite and >= 0. Its stack is not refused (the numbers matter more): ReportedStack.
absl::Status ValidateCollectivesReport(const v1::ReportCollectivesRequest& report);

// A reported stack (ReportCollectivesRequest.stack) made fit to forward and show on a terminal
// (ringctl describe, events): each line through OneLine (common/one_line.h: control characters,
// escape sequences and invalid UTF-8 made harmless), a longer one than kStackFrameBytes cut at
// the front ("...": its line and function stay), empty lines dropped, the innermost (last) lines
// kept within kStackBytes (common/one_line.h).
std::string ReportedStack(absl::string_view stack);

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_REPORT_VALIDATION_H_
