#include "agent/report_validation.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/collective_ops.h"
#include "common/link_groups.h"
#include "common/one_line.h"
#include "common/status.h"
#include "google/protobuf/map.h"

namespace ringmaster::agent {
namespace {

constexpr size_t kMaxGroupName = 64;

bool ValidGroupName(const std::string& name) {
  if (name.empty() || name.size() > kMaxGroupName) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') {
      return false;
    }
  }
  return true;
}

absl::Status GroupNameError(const std::string& field, const std::string& name) {
  return FieldError(
      field, absl::StrCat("must be 1 to ", kMaxGroupName, " characters of [A-Za-z0-9_.-], got \"",
                          absl::CEscape(name.substr(0, kMaxGroupName)), "\""));
}

absl::Status NonNegative(const std::string& field, double value) {
  if (std::isfinite(value) && value >= 0) return absl::OkStatus();
  return FieldError(field,
                    absl::StrCat("must be finite and >= 0, got ", absl::StrFormat("%g", value)));
}

absl::Status Sequences(const std::string& field,
                       const google::protobuf::Map<std::string, int64_t>& sequences) {
  if (sequences.size() > kMaxReportedGroups) {
    return FieldError(
        field, absl::StrCat("at most ", kMaxReportedGroups, " groups, got ", sequences.size()));
  }
  for (const auto& [group, sequence] : sequences) {
    if (!ValidGroupName(group)) return GroupNameError(field, group);
    if (sequence < 0) {
      return FieldError(absl::StrCat(field, "[", group, "]"),
                        absl::StrCat("must be >= 0, got ", sequence));
    }
  }
  return absl::OkStatus();
}

absl::Status Collective(const std::string& field, const v1::CollectiveStat& stat) {
  if (!IsReportableCollectiveOp(stat.op())) {
    return FieldError(absl::StrCat(field, ".op"),
                      absl::StrCat("must be one of ",
                                   absl::StrJoin(kReportableCollectiveOpNames, ", "),
                                   "; got \"", absl::CEscape(stat.op().substr(0, 32)), "\""));
  }
  if (!ValidGroupName(stat.group())) return GroupNameError(field + ".group", stat.group());
  RETURN_IF_ERROR(NonNegative(field + ".count", static_cast<double>(stat.count())));
  RETURN_IF_ERROR(NonNegative(field + ".bytes", static_cast<double>(stat.bytes())));
  RETURN_IF_ERROR(NonNegative(field + ".seconds", stat.seconds()));
  RETURN_IF_ERROR(NonNegative(field + ".algbw_bytes_per_second", stat.algbw_bytes_per_second()));
  return NonNegative(field + ".busbw_bytes_per_second", stat.busbw_bytes_per_second());
}

}  // namespace

absl::Status ValidatePhaseReport(const v1::ReportPhaseRequest& report) {
  switch (report.phase()) {
    case v1::WORKER_PHASE_INIT:
    case v1::WORKER_PHASE_STEP:
    case v1::WORKER_PHASE_CHECKPOINT:
    case v1::WORKER_PHASE_EVAL:
      break;
    default:
      // STARTING and EXITED are the agent's to say; any other number is no phase at all.
      return FieldError("phase", absl::StrCat("must be init, step, checkpoint or eval, got ",
                                              static_cast<int>(report.phase())));
  }
  if (report.checkpoint_step() < 0) {
    return FieldError("checkpoint_step",
                      absl::StrCat("must be >= 0, got ", report.checkpoint_step()));
  }
  return NonNegative("checkpoint_seconds", report.checkpoint_seconds());
}

absl::Status ValidateStepReport(const v1::ReportStepRequest& report) {
  if (report.step() < 1) {
    return FieldError("step", absl::StrCat("must be >= 1, got ", report.step()));
  }
  RETURN_IF_ERROR(NonNegative("tokens", static_cast<double>(report.tokens())));
  RETURN_IF_ERROR(NonNegative("state_bytes", static_cast<double>(report.state_bytes())));
  RETURN_IF_ERROR(NonNegative("step_seconds", report.step_seconds()));
  RETURN_IF_ERROR(NonNegative("compute_seconds", report.compute_seconds()));
  RETURN_IF_ERROR(NonNegative("input_seconds", report.input_seconds()));
  RETURN_IF_ERROR(NonNegative("comm_seconds", report.comm_seconds()));
  RETURN_IF_ERROR(NonNegative("stage_compute_seconds", report.stage_compute_seconds()));
  RETURN_IF_ERROR(NonNegative("mfu", report.mfu()));
  RETURN_IF_ERROR(NonNegative("rendezvous_seconds", report.rendezvous_seconds()));
  RETURN_IF_ERROR(NonNegative("restore_seconds", report.restore_seconds()));
  // Like the loss, a NaN or infinite norm is reported (a diverged run), not refused.
  if (report.has_grad_norm() && report.grad_norm() < 0) {
    return FieldError("grad_norm", absl::StrFormat("must be >= 0, got %g", report.grad_norm()));
  }
  if (!(report.bubble_fraction() >= 0 && report.bubble_fraction() <= 1)) {
    return FieldError("bubble_fraction",
                      absl::StrFormat("must be in [0, 1], got %g", report.bubble_fraction()));
  }
  if (report.collectives_size() > kMaxReportedCollectives) {
    return FieldError("collectives", absl::StrCat("at most ", kMaxReportedCollectives,
                                                  " entries, got ", report.collectives_size()));
  }
  for (int i = 0; i < report.collectives_size(); ++i) {
    RETURN_IF_ERROR(Collective(absl::StrCat("collectives[", i, "]"), report.collectives(i)));
  }
  RETURN_IF_ERROR(Sequences("collective_entered", report.collective_entered()));
  return Sequences("collective_completed", report.collective_completed());
}

absl::Status ValidateLinksReport(const v1::ReportLinksRequest& report) {
  RETURN_IF_ERROR(NonNegative("seconds", report.seconds()));
  if (report.links_size() > kMaxReportedLinks) {
    return FieldError("links", absl::StrCat("at most ", kMaxReportedLinks, " entries, got ",
                                            report.links_size()));
  }
  for (int i = 0; i < report.links_size(); ++i) {
    const v1::LinkStat& link = report.links(i);
    const std::string field = absl::StrCat("links[", i, "]");
    if (!ValidGroupName(link.group())) return GroupNameError(field + ".group", link.group());
    if (!IsLinkGroupName(link.group())) {
      return FieldError(field + ".group",
                        absl::StrCat("must name a tp, pp, dp or emb group followed by its number "
                                     "(e.g. dp0), got \"",
                                     link.group(), "\""));
    }
    if (link.peer_rank() < 0) {
      return FieldError(field + ".peer_rank", absl::StrCat("must be >= 0, got ", link.peer_rank()));
    }
    if (link.bytes() <= 0) {
      return FieldError(field + ".bytes", absl::StrCat("must be > 0, got ", link.bytes()));
    }
    if (!(std::isfinite(link.seconds()) && link.seconds() > 0)) {
      return FieldError(field + ".seconds",
                        absl::StrFormat("must be finite and > 0, got %g", link.seconds()));
    }
    RETURN_IF_ERROR(NonNegative(field + ".wrong", static_cast<double>(link.wrong())));
  }
  return absl::OkStatus();
}

absl::Status ValidateCollectivesReport(const v1::ReportCollectivesRequest& report) {
  RETURN_IF_ERROR(Sequences("collective_entered", report.collective_entered()));
  RETURN_IF_ERROR(Sequences("collective_completed", report.collective_completed()));
  RETURN_IF_ERROR(NonNegative("timeout_seconds", report.timeout_seconds()));
  return NonNegative("thread_cpu_seconds", report.thread_cpu_seconds());
}

std::string ReportedStack(absl::string_view stack) {
  std::vector<std::string> frames;  // innermost first
  size_t bytes = 0;
  std::vector<absl::string_view> lines = absl::StrSplit(stack, '\n', absl::SkipEmpty());
  for (auto line = lines.rbegin(); line != lines.rend(); ++line) {
    // Cleaned whole (never longer), then cut at the front: a frame ends in its line and function.
    std::string frame = OneLine(*line, line->size() + 3);
    if (frame.size() > kStackFrameBytes) {
      size_t from = frame.size() - (kStackFrameBytes - 3);
      while (from < frame.size() && (static_cast<unsigned char>(frame[from]) & 0xC0) == 0x80) {
        ++from;  // not inside a character
      }
      frame = absl::StrCat("...", absl::string_view(frame).substr(from));
    }
    if (frame.empty()) continue;
    bytes += frame.size() + (frames.empty() ? 0 : 1);
    if (bytes > kStackBytes) break;
    frames.push_back(std::move(frame));
  }
  return absl::StrJoin(frames.rbegin(), frames.rend(), "\n");
}

}  // namespace ringmaster::agent
