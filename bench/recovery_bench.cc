// Fault-tolerance benchmark on a loopback cluster of real processes (coordinator, two agents with
// CPU slots, the builtin trainer):
//  1. crash -> first step after restart, for each --ranks: a worker is SIGKILLed --kills times
//     (each after a checkpoint); the coordinator's "recovered" event gives the phases (detect,
//     place, stop, rendezvous, restore, first step) and the total from the crash to the slowest
//     rank's first step of the new generation;
//  2. hang detection: a worker is SIGSTOPped with the automatic timeout (max(10 s, 5 x p99 step));
//     time from the signal to the coordinator's "hang" event, and the rank it names;
//  3. stragglers: one rank's compute stretched by --straggler_factor; the step at which it is
//     flagged; and straggler flags in --clean_steps steps of a clean run.
// Speed is reported here, never asserted in tests. Figures go to docs/benchmarks.md.
//
//   bazel run -c opt //bench:recovery_bench
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
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

ABSL_FLAG(std::string, ranks, "2,4,8", "World sizes for the crash benchmark.");
ABSL_FLAG(int, kills, 5, "Crashes per world size.");
ABSL_FLAG(double, straggler_factor, 1.2, "Compute stretch of the straggler.");
ABSL_FLAG(double, straggler_threshold, 1.1, "The job's watchdog.straggler_threshold.");
ABSL_FLAG(int, clean_steps, 2500, "Steps of the clean run (x 4 ranks = rank-steps).");
ABSL_FLAG(std::string, straggler_model,
          "{layers: 4, d_model: 256, heads: 8, seq_len: 128, vocab: 256}",
          "The straggler job's trainer.model (YAML); a bigger model means longer steps, and the "
          "detector needs about 10 s of summaries whatever the step time.");
ABSL_FLAG(std::string, parts, "crash,hang,straggler", "Which benchmarks to run.");
ABSL_FLAG(std::string, trainer_flags, "",
          "Crash benchmark: run the trainer as a command job with these flags, comma-separated "
          "(e.g. --shared_memory=false: Gloo between the ranks, so the link check measures "
          "them); empty: the builtin trainer.");

namespace ringmaster::bench {
namespace {

using testing::TestCluster;
using testing::TrainerPid;
using testing::WaitFor;

std::string JobYaml(const std::string& name, int ranks, const std::string& program,
                    const std::string& model, int64_t steps, const std::string& extra) {
  return absl::StrCat("name: ", name, "\nnodes: 2\ndevices_per_node: ", ranks / 2,
                      "\nparallelism: {tensor: 1, pipeline: 1, data: ", ranks, "}\ntrainer:\n  ",
                      program, "\n", model, "  steps: ", steps,
                      "\n  optimizer: {lr: 1.0e-3, weight_decay: 0.1, clip_grad_norm: 1.0}\n",
                      extra);
}

constexpr char kTinyModel[] =
    "  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n"
    "  batch: {micro_batch: 2, global_batch: 16}\n";

std::string Trainer(const std::string& flags) {
  return absl::StrCat("command: [\"", TestCluster::Runfile("trainer/trainer"), "\"", flags, "]");
}

// The crash benchmark's trainer: builtin, or a command job with --trainer_flags.
std::string CrashProgram() {
  const std::string flags = absl::GetFlag(FLAGS_trainer_flags);
  if (flags.empty()) return "builtin: gpt";
  std::string quoted;
  for (absl::string_view f : absl::StrSplit(flags, ',', absl::SkipEmpty())) {
    absl::StrAppend(&quoted, ", \"", f, "\"");
  }
  return Trainer(quoted);
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

absl::Status CrashBench(int ranks, int kills) {
  const std::string dir = absl::StrCat("/tmp/rm-recovery-bench-", ranks);
  std::filesystem::remove_all(dir);
  testing::TestClusterOptions options;
  options.slots = ranks / 2;
  ASSIGN_OR_RETURN(auto cluster, TestCluster::Start(dir, options));
  const std::string id = cluster->Submit(
      "crash", JobYaml("crash", ranks, CrashProgram(), kTinyModel, 1000000,
                       absl::StrCat("checkpoint: {dir: ", dir, "/ckpt, every_steps: 10, keep: 2}\n"
                                    "restart: {max_restarts: ", kills, "}\n")));
  if (id.empty()) return absl::InternalError("submit failed");
  std::map<std::string, std::vector<double>> phases;
  for (int k = 0; k < kills; ++k) {
    const int generation = k + 1;
    if (!WaitFor(
            [&] {
              return cluster->RankLog(id, generation, 0).find("committed") != std::string::npos;
            },
            absl::Seconds(120))) {
      return absl::DeadlineExceededError("no checkpoint");
    }
    const int victim = (k % (ranks - 1)) + 1;
    const pid_t pid = TrainerPid(cluster->RankLog(id, generation, victim));
    if (pid <= 0 || kill(pid, SIGKILL) != 0) return absl::InternalError("cannot kill the worker");
    std::string events;
    if (!WaitFor(
            [&] {
              events = cluster->Ctl({"describe", "job", id}).output;
              return Count(events, "recovery took") >= k + 1;
            },
            absl::Seconds(120))) {
      return absl::DeadlineExceededError(absl::StrCat("no recovery:\n", events));
    }
    std::vector<std::string> all;
    for (size_t at = events.find("recovery took "); at != std::string::npos;
         at = events.find("recovery took ", at + 1)) {
      all.push_back(events.substr(at + 14, events.find('\n', at) - at - 14));
    }
    const std::string last = all.back();  // "0.52 s: detect 0.01, place 0.00, ..."
    double total = 0;
    (void)absl::SimpleAtod(last.substr(0, last.find(' ')), &total);
    phases["total"].push_back(total);
    for (absl::string_view part : absl::StrSplit(last.substr(last.find(':') + 2), ", ")) {
      const size_t space = part.rfind(' ');
      double v = 0;
      (void)absl::SimpleAtod(part.substr(space + 1), &v);
      phases[std::string(part.substr(0, space))].push_back(v);
    }
    std::cout << absl::StrFormat("  %d ranks, crash %d: %s\n", ranks, k + 1, last);
  }
  cluster->Ctl({"cancel", id});
  std::cout << absl::StrFormat(
      "crash -> first step, %d ranks: median %.2f s over %d crashes (detect %.2f, place %.2f, "
      "stop %.2f, rendezvous %.2f, link check %.3f, restore %.2f, first step %.2f)\n",
      ranks, Median(phases["total"]), kills, Median(phases["detect"]), Median(phases["place"]),
      Median(phases["stop"]), Median(phases["rendezvous"]), Median(phases["link check"]),
      Median(phases["restore"]), Median(phases["first step"]));
  return absl::OkStatus();
}

absl::Status HangBench() {
  const std::string dir = "/tmp/rm-recovery-bench-hang";
  std::filesystem::remove_all(dir);
  ASSIGN_OR_RETURN(auto cluster, TestCluster::Start(dir, {}));
  const std::string id = cluster->Submit(
      "hang", JobYaml("hang", 4, "builtin: gpt", kTinyModel, 1000000, "restart: {max_restarts: 1}\n"));
  if (!WaitFor([&] { return cluster->RankLog(id, 1, 0).find("step 100/") != std::string::npos; },
               absl::Seconds(120))) {
    return absl::DeadlineExceededError("job did not reach step 100");
  }
  // The p99 step time from rank 0's log so far.
  std::vector<double> steps;
  const std::string log = cluster->RankLog(id, 1, 0);
  std::regex re("step_ms ([0-9.]+)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it) {
    steps.push_back(std::stod((*it)[1].str()) / 1000);
  }
  std::sort(steps.begin(), steps.end());
  const double p99 = steps[static_cast<size_t>(0.99 * (steps.size() - 1))];
  const pid_t pid = TrainerPid(cluster->RankLog(id, 1, 2));
  const absl::Time start = absl::Now();
  if (pid <= 0 || kill(pid, SIGSTOP) != 0) return absl::InternalError("cannot stop the worker");
  std::string events;
  if (!WaitFor(
          [&] {
            events = cluster->Ctl({"describe", "job", id}).output;
            return events.find("  hang  ") != std::string::npos;
          },
          absl::Seconds(120))) {
    return absl::DeadlineExceededError("no hang detected");
  }
  const double detected = absl::ToDoubleSeconds(absl::Now() - start);
  const size_t at = events.find("  hang  ");
  std::cout << absl::StrFormat(
      "hang: SIGSTOP of rank 2 -> hang event in %.1f s (goal max(10 s, 5 x p99 %.3f s) = %.1f s); "
      "event: %s\n",
      detected, p99, std::max(10.0, 5 * p99), events.substr(at + 8, events.find('\n', at) - at - 8));
  cluster->Ctl({"cancel", id});
  return absl::OkStatus();
}

absl::Status StragglerBench() {
  const std::string dir = "/tmp/rm-recovery-bench-straggler";
  std::filesystem::remove_all(dir);
  ASSIGN_OR_RETURN(auto cluster, TestCluster::Start(dir, {}));
  const std::string threshold =
      absl::StrFormat("watchdog: {straggler_threshold: %g}\n", absl::GetFlag(FLAGS_straggler_threshold));
  // By default a model whose steps take a few hundred ms here, so the agents' 1 s summaries
  // cover few steps.
  const std::string model = absl::StrCat("  model: ", absl::GetFlag(FLAGS_straggler_model),
                                         "\n  batch: {micro_batch: 4, global_batch: 16}\n");
  const std::string slow = cluster->Submit(
      "slow", JobYaml("slow", 4,
                      Trainer(absl::StrFormat(", \"--slow_rank=1\", \"--slow_factor=%g\"",
                                              absl::GetFlag(FLAGS_straggler_factor))),
                      model, 100000, threshold));
  std::string events;
  if (!WaitFor(
          [&] {
            events = cluster->Ctl({"describe", "job", slow}).output;
            return events.find(": straggler") != std::string::npos;
          },
          absl::Seconds(600))) {
    return absl::DeadlineExceededError("straggler never flagged");
  }
  std::smatch m;
  std::regex_search(events, m, std::regex("rank (\\d+) on \\S+ computes ([0-9.]+)x[^\n]* at step (\\d+)"));
  std::smatch step_time;  // describe's progress line: "step 0.123s"
  std::regex_search(events, step_time, std::regex("step ([0-9.]+)s  ckpt"));
  std::cout << absl::StrFormat(
      "straggler: rank 1 %.2fx slower, threshold %.2f, model %s (step %s s): flagged rank %s "
      "(ratio %s) at step %s\n",
      absl::GetFlag(FLAGS_straggler_factor), absl::GetFlag(FLAGS_straggler_threshold),
      absl::GetFlag(FLAGS_straggler_model), step_time[1].str(), m[1].str(), m[2].str(), m[3].str());
  cluster->Ctl({"cancel", slow});

  const int clean_steps = absl::GetFlag(FLAGS_clean_steps);
  const std::string clean = cluster->Submit(
      "clean", JobYaml("clean", 4, "builtin: gpt", kTinyModel, clean_steps, threshold));
  if (cluster->WaitForEnd(clean, absl::Seconds(3600)) != "SUCCEEDED") {
    return absl::InternalError("clean run failed");
  }
  events = cluster->Ctl({"describe", "job", clean}).output;
  std::cout << absl::StrFormat("clean run: %d rank-steps, threshold %.2f: %d straggler flags\n",
                               4 * clean_steps, absl::GetFlag(FLAGS_straggler_threshold),
                               Count(events, ": straggler"));
  return absl::OkStatus();
}

absl::Status Run() {
  const std::string parts = absl::GetFlag(FLAGS_parts);
  if (parts.find("crash") != std::string::npos) {
    for (absl::string_view r :
         absl::StrSplit(absl::GetFlag(FLAGS_ranks), ',', absl::SkipEmpty())) {
      int ranks = 0;
      if (!absl::SimpleAtoi(r, &ranks) || ranks < 2 || ranks % 2 != 0) {
        return FieldError("--ranks", "must be even numbers >= 2");
      }
      RETURN_IF_ERROR(CrashBench(ranks, absl::GetFlag(FLAGS_kills)));
    }
  }
  if (parts.find("hang") != std::string::npos) RETURN_IF_ERROR(HangBench());
  if (parts.find("straggler") != std::string::npos) RETURN_IF_ERROR(StragglerBench());
  return absl::OkStatus();
}

}  // namespace
}  // namespace ringmaster::bench

int main(int argc, char** argv) {
  absl::Status s = ringmaster::InitBinary(argc, argv, "recovery_bench", nullptr);
  if (s.ok()) s = ringmaster::bench::Run();
  if (!s.ok()) {
    std::cerr << "recovery_bench: " << s << "\n";
    return 1;
  }
  return 0;
}
