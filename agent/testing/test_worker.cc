// A small worker program for agent tests. In order, as its flags ask, it: prints
// "test_worker: started pid=<pid>"; ignores SIGTERM or says so when it comes; exits with a code on
// SIGUSR1, ignores it or says so when it comes; forks children that block forever (they print
// "test_worker: child pid=<pid>"); prints "test_worker: ready"; prints its environment, working
// directory, stdin, open descriptors and signal masks; enters INIT, meets the other ranks at a
// rendezvous, enters STEP and runs --steps steps of --step_seconds each, reported through the
// worker API; prints --print_bytes bytes of filler; then crashes (SIGSEGV), touches --eat_memory_mb
// MiB (and exits 1), hangs, or exits with --exit_code. If its rank is among
// --hold_ranks, it waits for --hold_until_file to exist before it exits (or before the
// rendezvous, with --hold_before_rendezvous).
//
// Identity and the agent's socket come from RINGMASTER_JOB, RINGMASTER_GENERATION, RANK and
// RINGMASTER_AGENT_SOCKET (a path, or "unix:<path>"). Without a socket steps are only printed.
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/oom_score.h"
#include "agent/testing/touch_memory.h"
#include "common/flags.h"
#include "common/status.h"
#include "proto/ringmaster/v1/worker.grpc.pb.h"
#include "trainer/worker/agent_client.h"

ABSL_FLAG(int, steps, 0, "Training steps to simulate and report.");
ABSL_FLAG(double, step_seconds, 0, "Seconds each step takes.");
ABSL_FLAG(int, exit_code, 0, "Exit code after the steps.");
ABSL_FLAG(bool, crash, false, "Die of SIGSEGV after the steps.");
ABSL_FLAG(bool, hang, false, "Block forever after the steps.");
ABSL_FLAG(int, eat_memory_mb, 0,
          "After the steps, touch this many MiB of memory in 8 MiB pieces, then exit 1 (a "
          "test runs it where the OOM killer ends it first).");
ABSL_FLAG(bool, ignore_sigterm, false, "Ignore SIGTERM (forked children too).");
ABSL_FLAG(bool, say_on_sigterm, false,
          "On SIGTERM, print \"test_worker: got SIGTERM\" and die of it.");
ABSL_FLAG(int, sigusr1_exit_code, -1,
          "On SIGUSR1 (the agent's request to checkpoint and exit), exit with this code; -1: "
          "SIGUSR1's default action.");
ABSL_FLAG(bool, ignore_sigusr1, false, "Ignore SIGUSR1.");
ABSL_FLAG(bool, say_on_sigusr1, false,
          "On SIGUSR1, print \"test_worker: got SIGUSR1\" and go on (a worker whose checkpoint "
          "takes longer than the agent's grace).");
ABSL_FLAG(int, fork_children, 0, "Children to fork; they stay in the group and block forever.");
ABSL_FLAG(bool, print_env, false,
          "Print the environment, working directory, stdin, open descriptors, signal masks.");
ABSL_FLAG(int64_t, print_bytes, 0, "Bytes of numbered filler lines to print after the steps.");
ABSL_FLAG(std::string, hold_until_file, "",
          "After the steps, wait until this file exists (ranks in --hold_ranks only).");
ABSL_FLAG(std::vector<std::string>, hold_ranks, {},
          "The ranks --hold_until_file holds (every rank when empty).");
ABSL_FLAG(bool, hold_before_rendezvous, false,
          "--hold_until_file holds before the rendezvous rather than before the exit.");
ABSL_FLAG(bool, rendezvous, false,
          "Rank 0 sets key \"hello\" to \"world\"; other ranks wait for it (30 s) and print it.");

namespace ringmaster {
namespace {

using trainer::AgentClient;

constexpr double kRendezvousSeconds = 30;

void Say(const std::string& line) {
  std::printf("test_worker: %s\n", line.c_str());
  std::fflush(stdout);
}

// Forks `count` children that block forever; they inherit SIGTERM's disposition.
absl::Status ForkChildren(int count) {
  for (int i = 0; i < count; ++i) {
    std::fflush(stdout);  // Or the child would print what the parent buffered.
    pid_t pid = fork();
    if (pid < 0) return ErrnoError(errno, "fork");
    if (pid == 0) {
      Say(absl::StrCat("child pid=", getpid()));
      for (;;) pause();
    }
  }
  return absl::OkStatus();
}

void PrintEnvironment() {
  Say("env begin");
  for (char** entry = environ; *entry != nullptr; ++entry) std::printf("%s\n", *entry);
  Say("env end");
  char cwd[4096];
  Say(absl::StrCat("cwd=", getcwd(cwd, sizeof(cwd)) != nullptr ? cwd : "?"));
  char target[4096];
  ssize_t n = readlink("/proc/self/fd/0", target, sizeof(target) - 1);
  Say(absl::StrCat("stdin=", n > 0 ? std::string(target, n) : "?"));
  std::string fds;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (dirent* entry = readdir(dir)) {
      int fd = -1;
      if (absl::SimpleAtoi(entry->d_name, &fd) && fd != dirfd(dir)) {
        absl::StrAppend(&fds, fds.empty() ? "" : " ", fd);
      }
    }
    closedir(dir);
  }
  Say(absl::StrCat("open fds=", fds));
  // The signal masks as the kernel shows them: "SigBlk:\t<hex>" and "SigIgn:\t<hex>".
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (absl::StartsWith(line, "SigBlk:") || absl::StartsWith(line, "SigIgn:")) {
      Say(absl::StrCat("signals ", absl::StripAsciiWhitespace(line.substr(0, 6)), "=",
                       absl::StripAsciiWhitespace(line.substr(7))));
    }
  }
}

absl::Status ReportPhase(AgentClient* agent, v1::WorkerPhase phase) {
  v1::ReportPhaseRequest request;
  request.set_phase(phase);
  return agent->ReportPhase(request);
}

absl::Status Rendezvous(AgentClient* agent) {
  if (agent == nullptr) {
    return absl::FailedPreconditionError("--rendezvous needs RINGMASTER_AGENT_SOCKET");
  }
  if (agent->identity().rank() == 0) {
    RETURN_IF_ERROR(agent->Set("hello", "world"));
    Say("rendezvous set hello");
    return absl::OkStatus();
  }
  Say("rendezvous waiting for hello");
  ASSIGN_OR_RETURN(std::string value, agent->Wait("hello", absl::Seconds(kRendezvousSeconds)));
  Say(absl::StrCat("rendezvous hello=", value));
  return absl::OkStatus();
}

absl::Status RunSteps(AgentClient* agent, int steps, absl::Duration step_time) {
  constexpr int64_t kTokensPerStep = 8192;
  for (int step = 1; step <= steps; ++step) {
    absl::Time start = absl::Now();
    absl::SleepFor(step_time);  // Simulated work.
    double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    double loss = 2.0 + 8.0 * std::exp(-0.1 * step);
    Say(absl::StrCat("step ", step, " loss=", loss));
    if (agent == nullptr) continue;
    v1::ReportStepRequest report;
    report.set_step(step);
    report.set_loss(loss);
    report.set_tokens(kTokensPerStep);
    report.set_step_seconds(seconds);
    report.set_compute_seconds(0.8 * seconds);
    report.set_comm_seconds(0.2 * seconds);
    RETURN_IF_ERROR(agent->ReportStep(report));
  }
  return absl::OkStatus();
}

void PrintFiller(int64_t bytes) {
  for (int64_t line = 0, printed = 0; printed < bytes; ++line) {
    // 64 bytes a line, newline included.
    printed += std::printf("filler %08lld %s\n", static_cast<long long>(line),
                           "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvw");
  }
  std::fflush(stdout);
}

// Waits until --hold_until_file exists, if set and this rank is among --hold_ranks.
void Hold() {
  const std::string path = absl::GetFlag(FLAGS_hold_until_file);
  if (path.empty()) return;
  const std::vector<std::string> ranks = absl::GetFlag(FLAGS_hold_ranks);
  const char* rank = std::getenv("RANK");
  if (!ranks.empty() && (rank == nullptr ||
                         std::find(ranks.begin(), ranks.end(), std::string(rank)) == ranks.end())) {
    return;
  }
  Say(absl::StrCat("holding until ", path, " exists"));
  while (access(path.c_str(), F_OK) != 0) absl::SleepFor(absl::Milliseconds(20));
}

[[noreturn]] void Crash() {
  Say("crashing");
  rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);  // A failure only means a core file may be written.
  signal(SIGSEGV, SIG_DFL);
  raise(SIGSEGV);
  abort();  // Not reached.
}

// For the OOM killer (tests run it in a memory cgroup with a lower limit).
// It first makes itself the OOM killer's choice: in production the agent lowers its own
// oom_score_adj (--oom_score_adj), which a sandbox may refuse, and then the agents sharing the
// test's cgroup could be chosen instead (raising one's own value needs no privilege).
[[noreturn]] void EatMemory(int mb) {
  if (absl::Status s = agent::SetOomScoreAdj(agent::kMaxOomScoreAdj); !s.ok()) {
    Say(absl::StrCat("cannot raise oom_score_adj: ", s.message()));
  }
  Say(absl::StrCat("eating ", mb, " MiB"));
  (void)agent::TouchMemory(mb);  // all of it, or until a mapping fails
  // Not killed: the limit it was meant to meet is not there. Fail rather than hold the memory.
  Say("ate it all without being killed");
  std::exit(1);
}

[[noreturn]] void Hang() {
  Say("hanging");
  for (;;) pause();
}

// Async-signal-safe: write(2), then the default action.
void SayAndDieOfSigterm(int) {
  constexpr char kLine[] = "test_worker: got SIGTERM\n";
  (void)!write(STDOUT_FILENO, kLine, sizeof(kLine) - 1);
  signal(SIGTERM, SIG_DFL);
  raise(SIGTERM);
}

// Async-signal-safe.
void SayOnSigusr1(int) {
  constexpr char kLine[] = "test_worker: got SIGUSR1\n";
  (void)!write(STDOUT_FILENO, kLine, sizeof(kLine) - 1);
}

int sigusr1_exit_code = -1;  // for the handler

void ExitOnSigusr1(int) { _exit(sigusr1_exit_code); }

// Returns the exit code.
absl::StatusOr<int> Run() {
  if (absl::GetFlag(FLAGS_ignore_sigterm)) signal(SIGTERM, SIG_IGN);
  if (absl::GetFlag(FLAGS_say_on_sigterm)) signal(SIGTERM, SayAndDieOfSigterm);
  sigusr1_exit_code = absl::GetFlag(FLAGS_sigusr1_exit_code);
  if (sigusr1_exit_code >= 0) signal(SIGUSR1, ExitOnSigusr1);
  if (absl::GetFlag(FLAGS_ignore_sigusr1)) signal(SIGUSR1, SIG_IGN);
  if (absl::GetFlag(FLAGS_say_on_sigusr1)) signal(SIGUSR1, SayOnSigusr1);
  // Before any gRPC thread exists, so the children are plain copies of this thread.
  RETURN_IF_ERROR(ForkChildren(absl::GetFlag(FLAGS_fork_children)));
  Say("ready");
  if (absl::GetFlag(FLAGS_print_env)) PrintEnvironment();

  ASSIGN_OR_RETURN(std::unique_ptr<AgentClient> agent,
                   AgentClient::FromEnvironment(trainer::ProcessEnvironment()));
  if (agent != nullptr) RETURN_IF_ERROR(ReportPhase(agent.get(), v1::WORKER_PHASE_INIT));
  const bool hold_first = absl::GetFlag(FLAGS_hold_before_rendezvous);
  if (hold_first) Hold();
  if (absl::GetFlag(FLAGS_rendezvous)) RETURN_IF_ERROR(Rendezvous(agent.get()));
  if (agent != nullptr) RETURN_IF_ERROR(ReportPhase(agent.get(), v1::WORKER_PHASE_STEP));
  RETURN_IF_ERROR(RunSteps(agent.get(), absl::GetFlag(FLAGS_steps),
                           absl::Seconds(absl::GetFlag(FLAGS_step_seconds))));
  if (absl::GetFlag(FLAGS_print_bytes) > 0) PrintFiller(absl::GetFlag(FLAGS_print_bytes));
  if (!hold_first) Hold();
  if (absl::GetFlag(FLAGS_crash)) Crash();
  if (absl::GetFlag(FLAGS_eat_memory_mb) > 0) EatMemory(absl::GetFlag(FLAGS_eat_memory_mb));
  if (absl::GetFlag(FLAGS_hang)) Hang();

  int code = absl::GetFlag(FLAGS_exit_code);
  if (agent != nullptr) {
    RETURN_IF_ERROR(agent->ReportExit(code, code == 0 ? "done" : "asked to fail"));
  }
  return code;
}

}  // namespace
}  // namespace ringmaster

int main(int argc, char** argv) {
  ringmaster::Say(absl::StrCat("started pid=", getpid()));
  absl::Status init = ringmaster::InitBinary(
      argc, argv, "test_worker [--steps=N] [--crash|--hang|--exit_code=C] ...", nullptr);
  absl::StatusOr<int> code = init.ok() ? ringmaster::Run() : absl::StatusOr<int>(init);
  if (!code.ok()) {
    ringmaster::Say(absl::StrCat("error: ", code.status().ToString()));
    return ringmaster::ExitCodeFor(code.status());
  }
  ringmaster::Say(absl::StrCat("exiting with ", *code));
  return *code;
}
