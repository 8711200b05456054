#include "ctl/help.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ringmaster::ctl {
namespace {

constexpr char kOutputFlagText[] =
    "Output format: table (default), wide (table with more columns), json or yaml. The "
    "columns, and the json/yaml fields (the API's field names), are documented in "
    "docs/ringctl.md and stay stable.";

const std::vector<FlagHelp>& OtherFlags() {
  static const auto* flags = new std::vector<FlagHelp>{
      {"f", "FILE", "", "Job file (YAML); see docs/job-file.md for its keys."},
      {"wait", "", "",
       "Follow the job's events and progress until it ends; exit 1 unless it SUCCEEDED."},
      {"request_id", "KEY", "", "Idempotency key: a retry with the same key returns the same job."},
      {"o", "FORMAT", "", kOutputFlagText},
      {"state", "S,...", "",
       "Only jobs in these states (pending, running, restarting, succeeded, failed, cancelled)."},
      {"reason", "TEXT", "", "Why: recorded in the job's events, or kept with the cordon."},
      {"rank", "N", "", "Only this global rank (default: every rank, each line prefixed)."},
      {"follow", "", "", "Keep printing new output until the ranks exit."},
      {"wait_timeout", "SECONDS", "", "With --wait: how long to wait for the result (300)."},
      {"plain", "", "",
       "Plain lines even on a terminal (no live block, no screen redraw): what a pipe gets."},
      {"interval", "SECONDS", "", "Seconds between two refreshes (2)."},
      {"n", "N", "",
       "Stop after N refreshes (0, the default: when the job ends); also --iterations=N."},
  };
  return *flags;
}

std::string FlagLine(const FlagHelp& f) {
  std::string name = absl::StrCat(f.name.size() == 1 ? "-" : "--", f.name);
  if (!f.value.empty()) absl::StrAppend(&name, f.name.size() == 1 ? " " : "=", f.value);
  std::string line = absl::StrCat("  ", name);
  line.resize(std::max<size_t>(line.size() + 2, 26), ' ');
  absl::StrAppend(&line, f.text);
  if (!f.env.empty()) absl::StrAppend(&line, " [$", f.env, "]");
  return line + "\n";
}

std::string Name(const CommandHelp& c) { return absl::StrJoin(c.words, " "); }

std::string OneCommand(const CommandHelp& c) {
  std::string out = absl::StrCat("ringctl ", Name(c), ": ", c.summary, "\n\nusage: ringctl ",
                                 Name(c), c.args.empty() ? "" : " " + c.args, "\n");
  if (!c.details.empty()) absl::StrAppend(&out, "\n", c.details, "\n");
  if (!c.flags.empty()) {
    absl::StrAppend(&out, "\nflags:\n");
    for (const std::string& name : c.flags) absl::StrAppend(&out, FlagLine(*FindFlag(name)));
  }
  if (c.connects) {
    absl::StrAppend(&out, "\nconnection flags (ringctl --help for all of them):\n");
    for (const FlagHelp& f : ConnectionFlags()) {
      if (f.name == "coordinator" || f.name == "token" || f.name == "insecure") {
        absl::StrAppend(&out, FlagLine(f));
      }
    }
  }
  absl::StrAppend(&out, "\nexample:\n  ", c.example, "\n");
  return out;
}

}  // namespace

const std::vector<CommandHelp>& Commands() {
  static const auto* commands = new std::vector<CommandHelp>{
      {{"submit"},
       "-f FILE [--wait]",
       "submit a job",
       "Prints the job's id. With --wait, follows the job as `watch` does until it ends.",
       {"f", "wait", "request_id", "plain"},
       true,
       "ringctl submit -f job.yaml --wait"},
      {{"get", "jobs"},
       "[--state=S,...] [-o wide|json|yaml]",
       "list jobs, newest first",
       "Columns: ID NAME STATE GEN RESTARTS STEP AGE REASON; -o wide adds OWNER NODES DEVICES "
       "LAYOUT LOSS TOKENS/S.",
       {"state", "o"},
       true,
       "ringctl get jobs --state=running,pending -o wide"},
      {{"get", "job"},
       "ID [-o wide|json|yaml]",
       "one job",
       "-o json and -o yaml print every field, zeros included (rank 0 shows as rank: 0).",
       {"o"},
       true,
       "ringctl get job job-0001 -o yaml"},
      {{"describe", "job"},
       "ID",
       "a job's plan, ranks, groups and events",
       "",
       {},
       true,
       "ringctl describe job job-0001"},
      {{"cancel"},
       "ID [--reason=TEXT]",
       "cancel a job and stop its workers",
       "A job that already ended is left as it is: exit 1 names its state (0 if it was "
       "cancelled before).",
       {"reason"},
       true,
       "ringctl cancel job-0001 --reason=\"wrong dataset\""},
      {{"watch"},
       "ID [--plain]",
       "follow a job's events and progress until it ends",
       "On a terminal, a status block stays at the bottom, redrawn in place: state, a progress "
       "bar over the\njob's steps with ETA, loss, tokens/s, MFU, step time, checkpoint, "
       "restarts; events print above it.\nPiped (or with --plain, or TERM=dumb): one line per "
       "event and per progress change.",
       {"plain"},
       true,
       "ringctl watch job-0001"},
      {{"top"},
       "ID [--interval=SECONDS] [-n N] [--plain]",
       "a running job's ranks, refreshed in place",
       "Columns: RANK NODE STEP STEP-P50 STEP-P99 COMPUTE BUSBW MFU HEARD FLAGS NOW (flags: "
       "straggler,\nhung, done, silent; now: what the rank does, \"stepping\", \"in world #35\" "
       "waiting, \"behind\nworld #35 (at #34)\" holding it up, \"outside collectives\", "
       "\"checkpoint\"...). Ends when the job\nends, showing its final state. Piped (or with "
       "--plain), one table per refresh, a blank line apart.",
       {"interval", "n", "plain"},
       true,
       "ringctl top job-0001 --interval=1"},
      {{"logs"},
       "ID [--rank=N] [--follow]",
       "the ranks' stdout and stderr",
       "Without --rank, every rank's output, each line prefixed with \"[rank N] \".",
       {"rank", "follow"},
       true,
       "ringctl logs job-0001 --follow"},
      {{"check-links"},
       "ID [--wait]",
       "have a running job's ranks measure their links again",
       "With --wait, prints the result; exit 1 if it names a slow or corrupting link.",
       {"wait", "wait_timeout"},
       true,
       "ringctl check-links job-0001 --wait"},
      {{"nodes"},
       "[-o wide|json|yaml]",
       "registered nodes, and cordoned ones",
       "Columns: NAME KIND DEVICES IN-USE ALIVE HEARTBEAT SCHEDULING JOBS; -o wide adds "
       "CORDONED-BY REASON.",
       {"o"},
       true,
       "ringctl nodes -o wide"},
      {{"cordon"},
       "NODE [--reason=TEXT]",
       "no new placements on the node (admin)",
       "",
       {"reason"},
       true,
       "ringctl cordon agent-1 --reason=\"disk replacement\""},
      {{"drain"},
       "NODE [--reason=TEXT]",
       "cordon, and restart the node's running jobs elsewhere (admin)",
       "",
       {"reason"},
       true,
       "ringctl drain agent-1 --reason=\"kernel upgrade\""},
      {{"uncordon"}, "NODE", "placements on the node again (admin)", "", {}, true,
       "ringctl uncordon agent-1"},
      {{"release-node"},
       "NODE",
       "let another agent identity register the node's name (admin)",
       "See docs/security.md.",
       {},
       true,
       "ringctl release-node agent-1"},
      {{"plan"},
       "-f FILE",
       "what the planner would choose, without submitting",
       "",
       {"f"},
       true,
       "ringctl plan -f job.yaml"},
      {{"health"}, "", "is the coordinator serving?", "", {}, true, "ringctl health"},
      {{"completion"},
       "bash|zsh",
       "a shell completion script (commands, flags, job ids)",
       "",
       {},
       false,
       "ringctl completion bash > ~/.local/share/bash-completion/completions/ringctl"},
      {{"version"}, "", "ringctl's version", "", {}, false, "ringctl version"},
  };
  return *commands;
}

const std::vector<FlagHelp>& ConnectionFlags() {
  static const auto* flags = new std::vector<FlagHelp>{
      {"coordinator", "HOST:PORT", "RINGMASTER_COORDINATOR", "The coordinator's address."},
      {"token", "TOKEN", "RINGMASTER_TOKEN", "Bearer token."},
      {"insecure", "", "RINGMASTER_INSECURE=1",
       "Plaintext, for a local cluster (tools/cluster); TLS otherwise."},
      {"tls_ca", "FILE", "RINGMASTER_TLS_CA",
       "PEM CA that signed the coordinator's certificate (default: the system's roots)."},
      {"tls_cert", "FILE", "RINGMASTER_TLS_CERT", "PEM client certificate, for mutual TLS."},
      {"tls_key", "FILE", "RINGMASTER_TLS_KEY", "PEM key of the client certificate."},
      {"timeout", "SECONDS", "", "Per-call deadline (10)."},
  };
  return *flags;
}

const FlagHelp* FindFlag(const std::string& name) {
  for (const auto* list : {&ConnectionFlags(), &OtherFlags()}) {
    for (const FlagHelp& f : *list) {
      if (f.name == name) return &f;
    }
  }
  return nullptr;
}

std::string MainHelp() {
  std::string out =
      "ringctl: the Ringmaster command-line client.\n\nusage: ringctl COMMAND [ARGS] [FLAGS]\n"
      "\ncommands:\n";
  for (const CommandHelp& c : Commands()) {
    std::string line = absl::StrCat("  ", Name(c), c.args.empty() ? "" : " " + c.args);
    if (line.size() > 44) {
      absl::StrAppend(&out, line, "\n");
      line.clear();
    }
    line.resize(46, ' ');
    absl::StrAppend(&out, line, c.summary, "\n");
  }
  absl::StrAppend(&out, "\nconnection flags (each falls back to its environment variable):\n");
  for (const FlagHelp& f : ConnectionFlags()) absl::StrAppend(&out, FlagLine(f));
  absl::StrAppend(
      &out,
      "\nA local cluster: `tools/cluster up --dir DIR` then `source DIR/env` sets\n"
      "RINGMASTER_COORDINATOR and RINGMASTER_INSECURE=1. A production coordinator speaks TLS:\n"
      "set RINGMASTER_COORDINATOR, RINGMASTER_TOKEN and, for a private CA, RINGMASTER_TLS_CA.\n"
      "\nexamples:\n"
      "  ringctl submit -f job.yaml --wait\n"
      "  ringctl get jobs -o wide\n"
      "  ringctl logs job-0001 --follow\n"
      "\n`ringctl help COMMAND` or `ringctl COMMAND --help` shows a command's flags.\n"
      "Exit codes: 0 success, 1 the command failed, 2 bad usage or a bad job file.\n");
  return out;
}

std::optional<std::string> CommandHelpText(const std::vector<std::string>& words) {
  std::string out;
  for (const CommandHelp& c : Commands()) {
    const bool full = words.size() >= c.words.size() &&
                      std::equal(c.words.begin(), c.words.end(), words.begin());
    if (full) return OneCommand(c);
    // "get" alone: every "get ..." command.
    if (words.size() == 1 && c.words.size() > 1 && c.words[0] == words[0]) {
      absl::StrAppend(&out, out.empty() ? "" : "\n", OneCommand(c));
    }
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace ringmaster::ctl
