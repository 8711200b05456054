// Node-loss benchmark on a loopback cluster of real processes (coordinator, agents with one CPU
// slot each, the builtin trainer): a 2-node job (DP 2, tiny GPT, a checkpoint every
// --every_steps) loses a node for good (its agent's process group SIGKILLed, its worker with it)
// just after a checkpoint commits. Each trial starts a fresh cluster.
//  spare   three agents, `spares: 1`: the spare replaces the lost node; from the kill to the
//          first step every rank of the new generation completed, at DP 2;
//  shrink  two agents, `min_nodes: 1`: the job shrinks to DP 1; from the kill to the first step
//          at DP 1. Then (grow) the lost agent comes back under the same node name: from the start
//          of its process to its registration, to the coordinator's "growing" decision, and to
//          the first step at DP 2 again; the steps the grow threw away (it checkpoints first).
// --loss=kill closes the node's connections (the coordinator sees its stream end at once);
// --loss=silent freezes it (SIGSTOP), as a host that hangs or is cut off: only the missing
// heartbeats tell (--lost_after, 2.5 s by default), and it is killed after the measurement.
// Times come from the coordinator's events (wall clock, this machine) and its "recovered" event's
// phases (detect, place, stop, rendezvous, link check, restore, first step); detection runs from
// the failure the coordinator saw (a lost node: its last heartbeat). Speed is reported here,
// never asserted. Figures go to docs/benchmarks.md.
//
//   bazel run -c opt //bench:elastic_recovery_bench -- --trials=5
//   bazel run -c opt //bench:elastic_recovery_bench -- --agent_flags=--prestart_spares
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <regex>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "common/status.h"
#include "common/testing/wait.h"
#include "tests/test_cluster.h"

ABSL_FLAG(std::string, parts, "spare,shrink",
          "Which to run: spare, shrink (shrink includes grow).");
ABSL_FLAG(int, trials, 5, "Node kills per part (a fresh cluster each).");
ABSL_FLAG(int, every_steps, 10, "The job's checkpoint.every_steps.");
ABSL_FLAG(std::string, agent_flags, "",
          "Extra flags for every agent, comma-separated (e.g. --prestart_spares).");
ABSL_FLAG(std::string, loss, "kill",
          "How the node goes: kill (SIGKILL: its connections close, the coordinator sees the "
          "stream end) or silent (SIGSTOP: nothing closes, the heartbeats stop; --lost_after).");
ABSL_FLAG(std::string, coordinator_flags, "",
          "Extra flags for the coordinator, comma-separated (e.g. --lost_after=1); empty: its "
          "defaults.");

namespace ringmaster::bench {
namespace {

using testing::TestCluster;
using testing::WaitFor;

constexpr absl::Duration kWait = absl::Seconds(120);

std::vector<std::string> SplitFlags(const std::string& flags) {
  return absl::StrSplit(flags, ',', absl::SkipEmpty());
}

// One event of `ringctl get job ID -o json`.
struct Event {
  absl::Time time;
  int generation = 0;
  std::string kind, message;
};

std::vector<Event> Events(TestCluster& cluster, const std::string& id) {
  const std::string json = cluster.Ctl({"get", "job", id, "-o", "json"}).output;
  // Each event's fields in the proto's order; generation 0 is left out of the JSON.
  static const std::regex re(
      "\"time_unix_nanos\":\\s*\"(\\d+)\",\\s*(?:\"generation\":\\s*\"(\\d+)\",\\s*)?"
      "\"kind\":\\s*\"([^\"]*)\",\\s*\"message\":\\s*\"((?:[^\"\\\\]|\\\\.)*)\"");
  std::vector<Event> events;
  for (auto it = std::sregex_iterator(json.begin(), json.end(), re); it != std::sregex_iterator();
       ++it) {
    Event e;
    int64_t nanos = 0;
    (void)absl::SimpleAtoi((*it)[1].str(), &nanos);  // the regex guarantees digits
    e.time = absl::FromUnixNanos(nanos);
    if ((*it)[2].matched) (void)absl::SimpleAtoi((*it)[2].str(), &e.generation);
    e.kind = (*it)[3].str();
    e.message = (*it)[4].str();
    events.push_back(std::move(e));
  }
  return events;
}

// The first event after `after` of `kind` whose message contains `text`.
const Event* Find(const std::vector<Event>& events, absl::Time after, const std::string& kind,
                  const std::string& text = "") {
  for (const Event& e : events) {
    if (e.time >= after && e.kind == kind && e.message.find(text) != std::string::npos) return &e;
  }
  return nullptr;
}

// Waits for such an event; DeadlineExceeded naming it and the events so far.
absl::StatusOr<Event> Await(TestCluster& cluster, const std::string& id, absl::Time after,
                            const std::string& kind, const std::string& text = "") {
  std::vector<Event> events;
  const Event* found = nullptr;
  if (!WaitFor(
          [&] {
            events = Events(cluster, id);
            found = Find(events, after, kind, text);
            return found != nullptr;
          },
          kWait)) {
    return absl::DeadlineExceededError(absl::StrCat("no ", kind, " event \"", text, "\":\n",
                                                    cluster.Ctl({"describe", "job", id}).output));
  }
  return *found;
}

// "recovery took 0.52 s: detect 0.01, place 0.00, ..." -> {"total": 0.52, "detect": 0.01, ...}.
std::map<std::string, double> Phases(const std::string& message) {
  std::map<std::string, double> phases;
  const size_t at = message.find("recovery took ");
  if (at == std::string::npos) return phases;
  std::string text = message.substr(at + 14);
  text = text.substr(0, text.find(';'));  // "; lost N steps ..." follows
  (void)absl::SimpleAtod(text.substr(0, text.find(' ')), &phases["total"]);
  for (absl::string_view part : absl::StrSplit(text.substr(text.find(':') + 2), ", ")) {
    const size_t space = part.rfind(' ');
    (void)absl::SimpleAtod(part.substr(space + 1), &phases[std::string(part.substr(0, space))]);
  }
  return phases;
}

// "...; resumed from step S: N trained steps lost (...)" in a "recovered" event, or 0.
double StepsLost(const std::string& message) {
  std::smatch m;
  double lost = 0;
  if (std::regex_search(message, m, std::regex("(\\d+) trained steps? lost"))) {
    (void)absl::SimpleAtod(m[1].str(), &lost);  // the regex guarantees digits
  }
  return lost;
}

// The time of the last "connected to the coordinator" line (the registration acknowledged) of an
// agent's log: "I1129 02:07:26.370692 ... connected to the coordinator", local time, this year.
std::optional<absl::Time> ConnectedAt(const std::string& log) {
  const size_t at = log.rfind("connected to the coordinator");
  if (at == std::string::npos) return std::nullopt;
  const size_t line = log.rfind('\n', at);
  const std::string stamp = log.substr(line == std::string::npos ? 1 : line + 2, 21);
  const absl::TimeZone local = absl::LocalTimeZone();
  absl::Time t;
  std::string error;
  if (!absl::ParseTime("%Y%m%d %H:%M:%E6S",
                       absl::StrCat(absl::FormatTime("%Y", absl::Now(), local), stamp), local, &t,
                       &error)) {
    return std::nullopt;
  }
  return t;
}

// The figures of every trial, by name.
using Samples = std::map<std::string, std::vector<double>>;

std::string Summary(std::vector<double> v) {
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  return absl::StrFormat("%.2f [%.2f-%.2f]", v[v.size() / 2], v.front(), v.back());
}

std::string Job(const std::string& name, const std::string& dir, const std::string& extra) {
  return absl::StrCat("name: ", name, "\nnodes: 2\ndevices_per_node: 1\n", extra,
                      "parallelism: {tensor: 1, pipeline: 1, data: 2}\ntrainer:\n  builtin: gpt\n",
                      "  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n",
                      "  batch: {micro_batch: 2, global_batch: 16}\n  steps: 1000000\n",
                      "  optimizer: {lr: 1.0e-3, weight_decay: 0.1, clip_grad_norm: 1.0}\n",
                      "checkpoint: {dir: ", dir,
                      "/ckpt, every_steps: ", absl::GetFlag(FLAGS_every_steps),
                      ", keep: 2}\nrestart: {max_restarts: 3}\n");
}

// After the job's second checkpoint, takes away the node running rank 1: --loss=kill SIGKILLs
// its agent's process group (its worker dies with it: PR_SET_PDEATHSIG, and is killed again
// here); --loss=silent SIGSTOPs them instead (no connection closes: a host that froze or was cut
// off), and Bury kills them once the recovery is measured. Returns the agent's index; `*killed`
// is the time of the signal.
struct LostNode {
  int agent = -1;
  pid_t worker = 0;
};

absl::StatusOr<LostNode> KillRank1Node(TestCluster& cluster, const std::string& id,
                                       absl::Time* killed) {
  const std::string committed =
      absl::StrCat("checkpoint at step ", 2 * absl::GetFlag(FLAGS_every_steps), " committed");
  if (!WaitFor([&] { return cluster.RankLog(id, 1, 0).find(committed) != std::string::npos; },
               kWait)) {
    return absl::DeadlineExceededError(absl::StrCat("no checkpoint:\n", cluster.RankLog(id, 1, 0)));
  }
  const std::string json = cluster.Ctl({"get", "job", id, "-o", "json"}).output;
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"rank\":\\s*1,\\s*\"node\":\\s*\"agent-(\\d+)\""))) {
    return absl::InternalError(absl::StrCat("no node for rank 1:\n", json));
  }
  LostNode lost;
  lost.agent = std::stoi(m[1].str());
  lost.worker = testing::TrainerPid(cluster.RankLog(id, 1, 1));
  const int signal = absl::GetFlag(FLAGS_loss) == "silent" ? SIGSTOP : SIGKILL;
  *killed = absl::Now();
  cluster.agent(lost.agent).Signal(signal);
  if (lost.worker > 0) (void)kill(lost.worker, signal);  // in its agent's group, normally
  if (signal == SIGKILL)
    RETURN_IF_ERROR(cluster.agent(lost.agent).Wait(absl::Seconds(30)).status());
  return lost;
}

// Kills a node KillRank1Node stopped (no-op for one it killed).
absl::Status Bury(TestCluster& cluster, const LostNode& lost) {
  if (absl::GetFlag(FLAGS_loss) != "silent") return absl::OkStatus();
  cluster.agent(lost.agent).Signal(SIGKILL);
  if (lost.worker > 0) (void)kill(lost.worker, SIGKILL);
  return cluster.agent(lost.agent).Wait(absl::Seconds(30)).status();
}

// Records one recovery: the failure the coordinator acted on (its "node_lost" or "worker_exit"
// event after `killed`), the "recovered" event of a later generation, and derived times.
absl::Status Record(TestCluster& cluster, const std::string& id, absl::Time killed,
                    const std::string& label, Samples* samples) {
  ASSIGN_OR_RETURN(const Event recovered, Await(cluster, id, killed, "recovered"));
  const std::vector<Event> events = Events(cluster, id);
  const Event* lost = Find(events, killed, "node_lost");
  const Event* exited = Find(events, killed, "worker_exit");
  const Event* first = lost;
  if (first == nullptr || (exited != nullptr && exited->time < first->time)) first = exited;
  if (first == nullptr) return absl::InternalError("no node_lost or worker_exit event");
  std::map<std::string, double> phases = Phases(recovered.message);
  // The slowest rank's first step ended `total - detect` after the decision.
  const double decided = absl::ToDoubleSeconds(first->time - killed);
  const double first_step = decided + phases["total"] - phases["detect"];
  (*samples)["kill -> decision"].push_back(decided);
  (*samples)["kill -> first step"].push_back(first_step);
  (*samples)["kill -> recovered event"].push_back(absl::ToDoubleSeconds(recovered.time - killed));
  for (const auto& [name, value] : phases) (*samples)[name].push_back(value);
  (*samples)["steps lost"].push_back(StepsLost(recovered.message));
  std::cout << absl::StrFormat(
      "  %s: %s first (%.2f s after the kill), first step %.2f s after the kill; %s\n", label,
      first->kind, decided, first_step, recovered.message);
  return absl::OkStatus();
}

// This run's own folder (mkdtemp), so that two runs at once never share a cluster's files.
const std::string& RunDir() {
  static const std::string* dir = [] {
    std::string pattern = "/tmp/rm-node-bench-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::cerr << "mkdtemp " << pattern << " failed: " << std::strerror(errno) << "\n";
      std::exit(1);
    }
    return new std::string(pattern);
  }();
  return *dir;
}

absl::StatusOr<std::unique_ptr<TestCluster>> Start(const std::string& dir, int agents) {
  std::error_code ignored;  // a folder left by an earlier trial of this run; Start makes it anew
  std::filesystem::remove_all(dir, ignored);
  testing::TestClusterOptions options;
  options.agents = agents;
  options.slots = 1;
  options.agent_flags = SplitFlags(absl::GetFlag(FLAGS_agent_flags));
  options.coordinator_flags = SplitFlags(absl::GetFlag(FLAGS_coordinator_flags));
  return TestCluster::Start(dir, options);
}

absl::Status SpareTrial(int trial, Samples* samples) {
  const std::string dir = absl::StrCat(RunDir(), "/spare-", trial);
  ASSIGN_OR_RETURN(auto cluster, Start(dir, 3));
  const std::string id = cluster->Submit("spared", Job("spared", dir, "spares: 1\n"));
  if (id.empty()) return absl::InternalError("submit failed");
  std::smatch m;
  std::string described;
  if (!WaitFor(
          [&] {
            described = cluster->Ctl({"describe", "job", id}).output;
            return std::regex_search(described, m, std::regex("Spares: +agent-(\\d+) \\(idle\\)"));
          },
          kWait)) {
    return absl::DeadlineExceededError(absl::StrCat("no spare held:\n", described));
  }
  const std::string spare = m[1].str();
  absl::Time killed;
  ASSIGN_OR_RETURN(const LostNode lost, KillRank1Node(*cluster, id, &killed));
  RETURN_IF_ERROR(Await(*cluster, id, killed, "spare",
                        absl::StrCat("spare agent-", spare, " replaced agent-", lost.agent))
                      .status());
  RETURN_IF_ERROR(Record(*cluster, id, killed, absl::StrCat("spare, trial ", trial + 1), samples));
  RETURN_IF_ERROR(Bury(*cluster, lost));
  cluster->Ctl({"cancel", id});
  return absl::OkStatus();
}

absl::Status ShrinkTrial(int trial, Samples* shrink, Samples* grow) {
  const std::string dir = absl::StrCat(RunDir(), "/shrink-", trial);
  ASSIGN_OR_RETURN(auto cluster, Start(dir, 2));
  const std::string id = cluster->Submit("elastic", Job("elastic", dir, "min_nodes: 1\n"));
  if (id.empty()) return absl::InternalError("submit failed");
  absl::Time killed;
  ASSIGN_OR_RETURN(const LostNode gone, KillRank1Node(*cluster, id, &killed));
  RETURN_IF_ERROR(Await(*cluster, id, killed, "elastic", "shrunk DP 2→1").status());
  RETURN_IF_ERROR(Record(*cluster, id, killed, absl::StrCat("shrink, trial ", trial + 1), shrink));
  RETURN_IF_ERROR(Bury(*cluster, gone));
  const int lost = gone.agent;

  // Grow: the lost agent's process again, under the same node name.
  const absl::Time started = absl::Now();
  RETURN_IF_ERROR(cluster->RestartAgent(lost));
  const std::string node = absl::StrCat("agent-", lost);
  absl::Time registered;
  if (!WaitFor(
          [&] {
            // `ringctl nodes`: NAME KIND DEVICES IN-USE ALIVE ..., one line per node.
            for (absl::string_view line : absl::StrSplit(cluster->Ctl({"nodes"}).output, '\n')) {
              const std::vector<absl::string_view> columns =
                  absl::StrSplit(line, ' ', absl::SkipEmpty());
              if (columns.size() > 4 && columns[0] == node && columns[4] == "yes") {
                registered = absl::Now();
                return true;
              }
            }
            return false;
          },
          kWait)) {
    return absl::DeadlineExceededError(
        absl::StrCat(node, " did not register:\n", cluster->Ctl({"nodes"}).output));
  }
  // The agent's own line, when its registration was acknowledged (ringctl's poll is later).
  if (std::optional<absl::Time> at = ConnectedAt(cluster->agent(lost).Log())) registered = *at;
  ASSIGN_OR_RETURN(const Event growing, Await(*cluster, id, started, "elastic", "growing DP 1→2"));
  RETURN_IF_ERROR(Await(*cluster, id, started, "elastic", "grew DP 1→2").status());
  ASSIGN_OR_RETURN(const Event recovered, Await(*cluster, id, growing.time, "recovered"));
  std::map<std::string, double> phases = Phases(recovered.message);
  // The grow's failure time is its decision (detect 0): the first step at DP 2 ended `total`
  // after the "growing" event.
  const double stall = phases["total"];
  // The coordinator decides to grow in the pass that handles the registration, often before the
  // agent has logged it: "start -> growing" holds both.
  (*grow)["start -> registered (agent's log)"].push_back(
      absl::ToDoubleSeconds(registered - started));
  (*grow)["start -> growing"].push_back(absl::ToDoubleSeconds(growing.time - started));
  (*grow)["growing -> first step at DP 2"].push_back(stall);
  (*grow)["start -> first step at DP 2"].push_back(absl::ToDoubleSeconds(growing.time - started) +
                                                   stall);
  for (const auto& [name, value] : phases) (*grow)[name].push_back(value);
  (*grow)["steps lost"].push_back(StepsLost(recovered.message));
  std::cout << absl::StrFormat(
      "  grow, trial %d: registered %.3f s after the agent's start, growing %.3f s after it; %s\n",
      trial + 1, absl::ToDoubleSeconds(registered - started),
      absl::ToDoubleSeconds(growing.time - started), recovered.message);
  cluster->Ctl({"cancel", id});
  return absl::OkStatus();
}

void Print(const std::string& title, const Samples& samples, int trials) {
  std::cout << title << " (median [min-max] over " << trials << " trials, seconds):\n";
  for (const auto& [name, values] : samples) {
    std::cout << absl::StrFormat("  %-34s %s\n", name, Summary(values));
  }
}

absl::Status Run() {
  const int trials = absl::GetFlag(FLAGS_trials);
  if (trials < 1) return FieldError("--trials", "must be at least 1");
  if (absl::GetFlag(FLAGS_every_steps) < 1)
    return FieldError("--every_steps", "must be at least 1");
  if (absl::GetFlag(FLAGS_loss) != "kill" && absl::GetFlag(FLAGS_loss) != "silent") {
    return FieldError("--loss", "must be kill or silent");
  }
  const std::vector<std::string> parts = SplitFlags(absl::GetFlag(FLAGS_parts));
  for (const std::string& part : parts) {
    if (part != "spare" && part != "shrink") {
      return FieldError("--parts", absl::StrCat("\"", part, "\" is not spare or shrink"));
    }
  }
  std::cout << "loss: " << absl::GetFlag(FLAGS_loss) << ", agent flags: ["
            << absl::GetFlag(FLAGS_agent_flags) << "], coordinator flags: ["
            << absl::GetFlag(FLAGS_coordinator_flags) << "]\n";
  const auto wants = [&](const char* part) {
    return std::find(parts.begin(), parts.end(), part) != parts.end();
  };
  if (wants("spare")) {
    Samples spare;
    for (int t = 0; t < trials; ++t) RETURN_IF_ERROR(SpareTrial(t, &spare));
    Print("spare: node kill -> first step at DP 2 on the spare", spare, trials);
  }
  if (wants("shrink")) {
    Samples shrink, grow;
    for (int t = 0; t < trials; ++t) RETURN_IF_ERROR(ShrinkTrial(t, &shrink, &grow));
    Print("shrink: node kill -> first step at DP 1", shrink, trials);
    Print("grow: the agent back -> first step at DP 2", grow, trials);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ringmaster::bench

int main(int argc, char** argv) {
  absl::Status s = ringmaster::InitBinary(argc, argv, "elastic_recovery_bench", nullptr);
  if (s.ok()) s = ringmaster::bench::Run();
  if (!s.ok()) {
    std::cerr << "elastic_recovery_bench: " << s << "\n";
    return 1;
  }
  return 0;
}
