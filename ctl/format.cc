#include "ctl/format.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/format_double.h"
#include "common/job_state.h"

namespace ringmaster::ctl {

std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

namespace {

std::string Age(int64_t since_unix_nanos, absl::Time now) {
  absl::Duration d = now - absl::FromUnixNanos(since_unix_nanos);
  if (d < absl::Minutes(2)) return absl::StrCat(absl::ToInt64Seconds(d), "s");
  if (d < absl::Hours(2)) return absl::StrCat(absl::ToInt64Minutes(d), "m");
  if (d < absl::Hours(48)) return absl::StrCat(absl::ToInt64Hours(d), "h");
  return absl::StrCat(absl::ToInt64Hours(d) / 24, "d");
}

std::string Layout(const v1::ParallelismSpec& p) {
  return absl::StrFormat("TP=%d PP=%d DP=%d", p.tensor(), p.pipeline(), p.data());
}

// "2026-11-24T03:00:00Z".
std::string UtcTime(int64_t unix_nanos) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixNanos(unix_nanos),
                          absl::UTCTimeZone());
}

// "0.4s ago", or "never".
std::string HeardAgo(const v1::RankLiveState& r) {
  if (r.last_report_age_seconds() < 0) return "never";
  return absl::StrFormat("%.1fs ago", r.last_report_age_seconds());
}

// "hang suspect", "straggler (1.85x)", "finished", or "-".
std::string RankStatus(const v1::RankLiveState& r) {
  std::vector<std::string> parts;
  if (r.hang_suspect()) parts.push_back("hang suspect");
  if (r.straggler()) parts.push_back(absl::StrFormat("straggler (%.2fx)", r.compute_ratio()));
  if (r.finished()) parts.push_back("finished");
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

}  // namespace

std::string DescribeLinkCheck(const v1::LinkCheckSummary& check) {
  std::string out =
      absl::StrCat("\nLinks (link check of generation ", check.generation(),
                   check.step() > 0 ? absl::StrCat(" after step ", check.step()) : "", ", ",
                   check.ranks_reported(), " of ", check.ranks_expected(), " ranks reported",
                   check.min_bytes_per_second() > 0
                       ? absl::StrCat("; floor ", FormatBandwidth(check.min_bytes_per_second()))
                       : "",
                   "):\n");
  if (check.ranks_reported() < check.ranks_expected()) {
    absl::StrAppend(&out, "  judged once every rank has reported\n");
    return out;
  }
  if (check.classes().empty()) {
    absl::StrAppend(&out, "  none measured (no group crosses a link)\n");
    return out;
  }
  std::vector<std::vector<std::string>> rows = {{"  KIND", "SCOPE", "LINKS", "MEDIAN", "LOWEST"}};
  for (const v1::LinkClass& c : check.classes()) {
    rows.push_back({absl::StrCat("  ", c.kind()), c.cross_node() ? "across nodes" : "inside a node",
                    absl::StrCat(c.links()), FormatBandwidth(c.median_bytes_per_second()),
                    FormatBandwidth(c.min_bytes_per_second())});
  }
  absl::StrAppend(&out, Table(rows));
  for (const v1::LinkState& l : check.slow()) {
    std::string why = l.wrong() > 0
                          ? absl::StrCat("CORRUPTS DATA (", l.wrong(),
                                         l.wrong() == 1 ? " element" : " elements",
                                         " arrived wrong)")
                          : (l.below_floor() ? "SLOW (below the floor)" : "SLOW");
    if (l.baseline_bytes_per_second() > 0) {
      absl::StrAppend(&why, absl::StrFormat(": %.2fx the median of the others (%s)",
                                            l.bytes_per_second() / l.baseline_bytes_per_second(),
                                            FormatBandwidth(l.baseline_bytes_per_second())));
    }
    absl::StrAppend(&out, "  ", l.group(), " rank ", l.rank(), " (", l.node(), ") <-> rank ",
                    l.peer_rank(), " (", l.peer_node(),
                    "): ", FormatBandwidth(l.bytes_per_second()), " ", why, "\n");
  }
  if (check.slow().empty()) absl::StrAppend(&out, "  no slow or corrupting link\n");
  return out;
}

// "2 of 3"; with a restart window, the restarts in all and those that counted at the latest
// failure: "7 (2 of 3 within 60 minutes at the last failure)", or "0 (of 3 within 60 minutes)".
std::string RestartsLine(const v1::JobStatus& j) {
  const v1::RestartSpec& r = j.spec().restart();
  if (r.window_minutes() <= 0) return absl::StrCat(j.restarts(), " of ", r.max_restarts());
  if (j.restarts() == 0) {
    return absl::StrCat("0 (of ", r.max_restarts(), " within ", r.window_minutes(), " minutes)");
  }
  return absl::StrCat(j.restarts(), " (", j.counted_restart_unix_nanos_size(), " of ",
                      r.max_restarts(), " within ", r.window_minutes(),
                      " minutes at the last failure)");
}

std::string HumanBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrCat(bytes, " B") : absl::StrFormat("%.1f %s", v, units[u]);
}

std::string FormatJobTable(const std::vector<v1::JobStatus>& jobs, absl::Time now, bool wide) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "NAME", "STATE", "GEN", "RESTARTS", "STEP", "AGE"}};
  if (wide) rows[0].insert(rows[0].end(), {"OWNER", "NODES", "DEVICES", "LAYOUT", "LOSS", "TOKENS/S"});
  rows[0].push_back("REASON");
  for (const auto& j : jobs) {
    rows.push_back({j.job_id(), j.spec().name(), StateName(j.state()), absl::StrCat(j.generation()),
                    absl::StrCat(j.restarts()), absl::StrCat(j.progress().step()),
                    Age(j.submit_time_unix_nanos(), now)});
    if (wide) {
      std::vector<std::string> nodes;
      for (const auto& a : j.assignments()) {
        if (std::find(nodes.begin(), nodes.end(), a.node()) == nodes.end()) nodes.push_back(a.node());
      }
      const v1::ParallelismSpec& p = j.plan().parallelism();
      const bool reported = j.progress().step() > 0;
      rows.back().insert(
          rows.back().end(),
          {j.owner().empty() ? "-" : j.owner(), nodes.empty() ? "-" : absl::StrJoin(nodes, ","),
           absl::StrCat(j.spec().nodes(), "x", j.spec().devices_per_node()),
           p.data() > 0 ? absl::StrFormat("TP%d,PP%d,DP%d", p.tensor(), p.pipeline(), p.data())
                        : "-",
           reported ? absl::StrFormat("%.4f", j.progress().loss()) : "-",
           reported ? absl::StrFormat("%.0f", j.progress().tokens_per_second()) : "-"});
    }
    rows.back().push_back(j.reason());
  }
  return Table(rows);
}

std::string FormatEvent(const v1::JobEvent& e) {
  std::string text =
      absl::StrCat(UtcTime(e.time_unix_nanos()), "  gen ", e.generation(), "  ", e.kind(), "  ");
  if (e.kind() == "state") absl::StrAppend(&text, StateName(e.state()), ": ");
  absl::StrAppend(&text, e.message());
  if (e.ranks_size() > 0) absl::StrAppend(&text, "  [ranks ", absl::StrJoin(e.ranks(), ","), "]");
  return text;
}

std::string FormatProgress(const v1::JobProgress& p) {
  return absl::StrFormat("step %d  loss %.4f  tokens/s %.0f  step %.3fs  ckpt %d", p.step(),
                         p.loss(), p.tokens_per_second(), p.step_seconds(), p.checkpoint_step());
}

std::string FormatPlan(const v1::PlanJobResponse& response) {
  const v1::PlanExplanation& plan = response.plan();
  std::string out = absl::StrCat("layout:            ", Layout(plan.parallelism()), "\n");
  absl::StrAppend(&out, "parameters:        ", plan.parameters(), "\n");
  absl::StrAppend(&out, "memory per device: ", HumanBytes(plan.memory_per_device_bytes()),
                  " (weights, gradients, optimizer state)\n");
  absl::StrAppend(&out, "activations:       ", HumanBytes(plan.activation_bytes_per_microbatch()),
                  " per microbatch\n");
  absl::StrAppend(&out, "microbatches:      ", plan.microbatches(), "\n");
  absl::StrAppend(
      &out, absl::StrFormat("bubble fraction:   %.4f  ((p-1)/(m+p-1))\n", plan.bubble_fraction()));
  absl::StrAppend(&out, "bytes per step:    TP ", HumanBytes(plan.tp_bytes_per_step()), ", PP ",
                  HumanBytes(plan.pp_bytes_per_step()), ", DP ",
                  HumanBytes(plan.dp_bytes_per_step()), "\n");
  absl::StrAppend(&out, "reasons:\n");
  for (const auto& r : plan.reasons()) absl::StrAppend(&out, "  - ", r, "\n");
  if (!response.pending_reason().empty()) {
    absl::StrAppend(&out, "placement now:     would stay PENDING: ", response.pending_reason(),
                    "\n");
  } else {
    std::vector<std::string> nodes;
    for (const auto& a : response.assignments()) {
      if (std::find(nodes.begin(), nodes.end(), a.node()) == nodes.end()) nodes.push_back(a.node());
    }
    absl::StrAppend(&out, "placement now:     ", response.assignments_size(), " ranks on ",
                    nodes.size(), " nodes (", absl::StrJoin(nodes, ", "), ")\n");
  }
  return out;
}

std::string FormatNodes(const std::vector<v1::NodeStatus>& nodes, absl::Time now, bool wide) {
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "KIND", "DEVICES", "IN-USE", "ALIVE", "HEARTBEAT", "SCHEDULING", "JOBS"}};
  if (wide) rows[0].insert(rows[0].end(), {"CORDONED-BY", "REASON"});
  std::string cordons;
  auto scheduling_of = [](const v1::NodeStatus& n) -> std::string {
    if (n.has_cordon()) return "CORDONED";
    if (n.leaving()) return "LEAVING";
    return n.alive() && n.settling_seconds() > 0 ? "SETTLING" : "yes";
  };
  for (const auto& n : nodes) {
    if (n.alive() && n.settling_seconds() > 0) {
      absl::StrAppend(&cordons, n.name(), ": lost ", n.recent_losses(),
                      " times lately: settling for ",
                      absl::FormatDuration(absl::Ceil(absl::Seconds(n.settling_seconds()),
                                                      absl::Seconds(1))),
                      " more (jobs keep off it while other nodes fit)\n");
    }
    if (wide) {
      const std::string by = n.has_cordon() && !n.cordon().by().empty() ? n.cordon().by() : "-";
      const std::string why =
          n.has_cordon() && !n.cordon().reason().empty() ? n.cordon().reason() : "-";
      if (n.device_kind().empty()) {
        rows.push_back({n.name(), "-", "-", "-", "-", "unregistered", "CORDONED", "-", by, why});
        continue;
      }
      rows.push_back({n.name(), n.device_kind(), absl::StrCat(n.devices()),
                      absl::StrCat(n.devices_in_use()), n.alive() ? "yes" : "LOST",
                      absl::StrFormat("%.1fs", n.last_heartbeat_age_seconds()),
                      scheduling_of(n), n.jobs().empty() ? "-" : absl::StrJoin(n.jobs(), ","), by, why});
      continue;
    }
    const std::string scheduling = scheduling_of(n);
    if (n.has_cordon()) {
      absl::StrAppend(&cordons, n.name(), ": cordoned ", Age(n.cordon().since_unix_nanos(), now),
                      " ago", n.cordon().by().empty() ? "" : " by " + n.cordon().by(),
                      n.cordon().reason().empty() ? "" : ": " + n.cordon().reason(), "\n");
    }
    if (n.device_kind().empty()) {  // Cordoned, but not registered now.
      rows.push_back({n.name(), "-", "-", "-", "-", "not registered", scheduling, ""});
      continue;
    }
    rows.push_back({n.name(), n.device_kind(), absl::StrCat(n.devices()),
                    absl::StrCat(n.devices_in_use()), n.alive() ? "yes" : "LOST",
                    absl::StrFormat("%.1fs ago", n.last_heartbeat_age_seconds()), scheduling,
                    absl::StrJoin(n.jobs(), ",")});
  }
  return Table(rows) + (cordons.empty() ? "" : "\n" + cordons);
}

std::string FormatNodeUpdate(v1::NodeAction action, const v1::UpdateNodeResponse& response) {
  const std::string& node = response.node().name();
  switch (action) {
    case v1::NODE_ACTION_UNCORDON:
      return absl::StrCat("node ", node, " uncordoned: new placements may use it\n");
    case v1::NODE_ACTION_DRAIN:
      if (response.moved_jobs().empty()) {
        return absl::StrCat("node ", node, " cordoned; no running job had ranks on it\n");
      }
      return absl::StrCat("node ", node,
                          " cordoned; these jobs checkpoint, stop and restart elsewhere: ",
                          absl::StrJoin(response.moved_jobs(), ", "), "\n");
    default:
      return absl::StrCat("node ", node,
                          " cordoned: no new placements; what runs there keeps running\n");
  }
}

std::string DescribeJob(const v1::GetJobResponse& response) {
  const v1::JobStatus& j = response.job();
  const v1::JobSpec& spec = j.spec();
  std::string out;
  absl::StrAppend(&out, "Job:          ", j.job_id(), "\n");
  absl::StrAppend(&out, "Name:         ", spec.name(), "\n");
  absl::StrAppend(&out, "Owner:        ", j.owner().empty() ? "(anonymous)" : j.owner(), "\n");
  absl::StrAppend(&out, "State:        ", StateName(j.state()),
                  j.reason().empty() ? "" : "  (" + j.reason() + ")", "\n");
  absl::StrAppend(&out, "Generation:   ", j.generation(), "   Restarts: ", RestartsLine(j), "\n");
  if (!j.stopping_ranks().empty()) {
    absl::StrAppend(&out, "Waiting for:  ranks ", absl::StrJoin(j.stopping_ranks(), ", "),
                    " of generation ", j.generation(), " to checkpoint and exit, until ",
                    UtcTime(j.stopping_deadline_unix_nanos()), "\n");
  }
  if (j.state() == v1::JOB_STATE_RESTARTING && j.backoff_until_unix_nanos() > 0) {
    absl::StrAppend(&out, "Crash loop:   ", j.failures_before_a_step(),
                    " generations in a row failed before their first step; next launch at ",
                    UtcTime(j.backoff_until_unix_nanos()), "\n");
  }
  absl::StrAppend(&out, "Shape:        ", spec.nodes(), " nodes x ", spec.devices_per_node(),
                  " devices, ", Layout(j.plan().parallelism()));
  if (j.elastic_nodes() > 0 && spec.nodes() > 0) {  // an elastic job shrunk (spec.min_nodes)
    const int full = j.plan().parallelism().data();
    const int data = static_cast<int>(int64_t{full} * j.elastic_nodes() / spec.nodes());
    // The batch it keeps (spec/elastic.h): per replica, the learning rate follows DP.
    const bool per_replica = spec.elastic_batch() == v1::ELASTIC_BATCH_PER_REPLICA;
    absl::StrAppend(&out, "; running on ", j.elastic_nodes(), " of ", spec.nodes(), " nodes, DP ",
                    data, ", elastic_batch ", per_replica ? "per_replica" : "global",
                    per_replica && full > 0
                        ? absl::StrCat(" (learning rate x",
                                       FormatFiniteDouble(static_cast<double>(data) / full), ")")
                        : "");
  }
  absl::StrAppend(&out, "\n");
  if (j.state() == v1::JOB_STATE_RESTARTING && j.elastic_wait_until_unix_nanos() > 0) {
    absl::StrAppend(&out, "Elastic wait: for a replacement at ", spec.nodes(),
                    " nodes until ", UtcTime(j.elastic_wait_until_unix_nanos()),
                    ", then shrinking\n");
  }
  if (spec.spares() > 0 && !IsTerminal(j.state())) {
    std::vector<std::string> spares;
    for (const std::string& node : j.spare_nodes()) spares.push_back(node + " (idle)");
    absl::StrAppend(&out,
                    "Spares:       ", spares.empty() ? "none held" : absl::StrJoin(spares, ", "),
                    j.spare_nodes_size() < spec.spares()
                        ? absl::StrCat("; ", j.spare_nodes_size(), " of ", spec.spares(),
                                       " held, the rest when nodes free up")
                        : "",
                    "\n");
  }
  if (spec.trainer().has_command()) {
    absl::StrAppend(&out, "Command:      ", absl::StrJoin(spec.trainer().command().argv(), " "),
                    "\n");
  } else {
    const auto& m = spec.trainer().model();
    absl::StrAppend(&out, "Trainer:      ", spec.trainer().builtin(), " L=", m.layers(),
                    " d=", m.d_model(), " heads=", m.heads(), " T=", m.seq_len(),
                    " vocab=", m.vocab(), ", ", spec.trainer().steps(), " steps\n");
  }
  absl::StrAppend(&out, "Progress:     ", FormatProgress(j.progress()), "\n");
  if (j.assignments().empty() && !IsTerminal(j.state())) {
    absl::StrAppend(&out, "Ranks:        none running yet (", StateName(j.state()),
                    j.reason().empty() ? "" : ": " + j.reason(),
                    "); `ringctl watch ", j.job_id(), "` shows when they start\n");
  }
  absl::StrAppend(&out, "\nPlan:\n");
  v1::PlanJobResponse plan;
  *plan.mutable_plan() = j.plan();
  for (const auto& a : j.assignments()) *plan.add_assignments() = a;
  if (j.assignments().empty()) plan.set_pending_reason(j.reason().empty() ? "-" : j.reason());
  std::string plan_text = FormatPlan(plan);
  for (absl::string_view line : absl::StrSplit(plan_text, '\n', absl::SkipEmpty())) {
    absl::StrAppend(&out, "  ", line, "\n");
  }
  if (!j.assignments().empty()) {
    absl::StrAppend(&out, "\nAssignments:\n");
    // A running job's ranks also say how far each got and when it was last heard of.
    const bool live = response.ranks_size() == j.assignments_size();
    std::vector<std::vector<std::string>> rows = {
        {"  RANK", "NODE", "DEVICE", "LOCAL", "TP", "PP", "DP"}};
    if (live) rows[0].insert(rows[0].end(), {"STEP", "HEARD", "STATUS", "NOW"});
    for (const auto& a : j.assignments()) {
      rows.push_back({absl::StrCat("  ", a.rank()), a.node(), absl::StrCat(a.local_device()),
                      absl::StrCat(a.local_rank()), absl::StrCat(a.tp_rank()),
                      absl::StrCat(a.pp_rank()), absl::StrCat(a.dp_rank())});
      if (live && a.rank() >= 0 && a.rank() < response.ranks_size()) {
        const v1::RankLiveState& r = response.ranks(a.rank());
        rows.back().insert(rows.back().end(), {absl::StrCat(r.step()), HeardAgo(r), RankStatus(r),
                                               r.activity().empty() ? "-" : r.activity()});
      }
    }
    absl::StrAppend(&out, Table(rows));
    // Where each stalled Python rank's training thread is (the watch's stack), innermost last;
    // ranks stalled at the same place (peers waiting in one collective) together.
    std::vector<std::pair<std::string, std::vector<int>>> stalled;  // in order of first rank
    for (const v1::RankLiveState& r : response.ranks()) {
      if (r.stack().empty()) continue;
      auto same = std::find_if(stalled.begin(), stalled.end(),
                               [&r](const auto& s) { return s.first == r.stack(); });
      if (same == stalled.end()) same = stalled.insert(stalled.end(), {r.stack(), {}});
      same->second.push_back(r.rank());
    }
    for (const auto& [stack, ranks] : stalled) {
      absl::StrAppend(&out, "\n", ranks.size() == 1 ? "Rank " : "Ranks ",
                      absl::StrJoin(ranks, ", "), " stalled at (innermost last):\n");
      for (absl::string_view frame : absl::StrSplit(stack, '\n', absl::SkipEmpty())) {
        absl::StrAppend(&out, "  ", frame, "\n");
      }
    }
    absl::StrAppend(&out, "\nGroups:\n");
    auto groups = [&](const char* kind, const auto& list) {
      for (const auto& g : list) {
        absl::StrAppend(&out, "  ", kind, " ", g.name(), ": ", absl::StrJoin(g.ranks(), ","), "\n");
      }
    };
    groups("tensor  ", j.groups().tensor());
    groups("pipeline", j.groups().pipeline());
    groups("data    ", j.groups().data());
  }
  if (response.has_link_check()) absl::StrAppend(&out, DescribeLinkCheck(response.link_check()));
  absl::StrAppend(&out, "\nEvents:\n");
  if (response.events_omitted() > 0) {
    absl::StrAppend(&out, "  (", response.events_omitted(),
                    " older events left out: `ringctl watch ", j.job_id(), "` lists them all)\n");
  }
  for (const auto& e : response.events()) absl::StrAppend(&out, "  ", FormatEvent(e), "\n");
  return out;
}

}  // namespace ringmaster::ctl
