// The supervisor against real processes (agent/testing/test_worker): exit codes and signals are
// reported, exec failures exit 127 with the reason in the log, the environment and descriptors
// are exactly as given, logs rotate within their bound, and Stop() removes workers that ignore
// SIGTERM, are stopped, or forked children, leaving neither processes nor zombies behind; a
// checkpoint grace sends SIGUSR1 first, and a later Stop() with shorter graces hurries an earlier
// one.
#include "agent/worker_supervisor.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "agent/oom_score.h"
#include "common/grpc_server.h"
#include "common/testing/subprocess.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "grpcpp/security/server_credentials.h"
#include "gtest/gtest.h"
#include "proto/ringmaster/v1/worker.grpc.pb.h"

namespace ringmaster::agent {

// For gmock; in the type's namespace so that argument-dependent lookup finds them.
bool operator==(const ExitInfo& a, const ExitInfo& b) {
  return a.exit_code == b.exit_code && a.signal == b.signal;
}

void PrintTo(const ExitInfo& info, std::ostream* os) {
  *os << "{exit_code " << info.exit_code << ", signal " << info.signal << "}";
}

namespace {

using ::ringmaster::testing::FreshTestCaseDir;
using ::ringmaster::testing::WaitFor;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

constexpr absl::Duration kTimeout = absl::Seconds(30);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Fields of /proc/PID/stat after the command name: state, ppid, pgrp, ...
std::vector<std::string> ProcStat(pid_t pid) {
  std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return {};
  return absl::StrSplit(stat.substr(paren + 2), ' ');
}

// Processes (zombies included) whose parent is `parent`.
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    std::vector<std::string> fields = ProcStat(pid);
    pid_t ppid = 0;
    if (fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid) && ppid == parent) {
      children.push_back(pid);
    }
  }
  return children;
}

bool GroupGone(pid_t pgid) { return kill(-pgid, 0) != 0 && errno == ESRCH; }
bool ProcessGone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

// Pids the test worker's children logged.
std::vector<pid_t> ChildPids(const std::string& log) {
  std::vector<pid_t> pids;
  std::regex re("test_worker: child pid=(\\d+)");
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it) {
    pids.push_back(std::stoi((*it)[1].str()));
  }
  return pids;
}

ExitInfo Exited(int code) { return ExitInfo{code, 0}; }
ExitInfo Killed(int signal) { return ExitInfo{-1, signal}; }

class WorkerSupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestCaseDir();
    worker_ = std::filesystem::absolute("agent/testing/test_worker").string();
    supervisor_ = std::make_unique<WorkerSupervisor>([this](pid_t pid, ExitInfo info) {
      absl::MutexLock lock(&mu_);
      exits_[pid].push_back(info);
    });
  }

  void TearDown() override {
    supervisor_.reset();
    // Every worker and descendant is gone and reaped: the test process has no child left.
    EXPECT_THAT(ChildrenOf(getpid()), IsEmpty());
  }

  // A spec running the test worker with `flags`, logging to dir_/`name`.log.
  LaunchSpec Worker(std::vector<std::string> flags, const std::string& name = "worker") {
    LaunchSpec spec;
    spec.argv = {worker_};
    spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
    spec.log_path = dir_ + "/" + name + ".log";
    return spec;
  }

  pid_t Launch(const LaunchSpec& spec) {
    absl::StatusOr<pid_t> pid = supervisor_->Launch(spec);
    EXPECT_TRUE(pid.ok()) << pid.status();
    return pid.ok() ? *pid : -1;
  }

  // Every exit reported for `pid` so far.
  std::vector<ExitInfo> Exits(pid_t pid) {
    absl::MutexLock lock(&mu_);
    return exits_[pid];
  }

  // Waits for the exit of `pid` and returns it; ExitInfo{-2, -2} if none came.
  ExitInfo WaitForExit(pid_t pid) {
    if (!WaitFor([&] { return !Exits(pid).empty(); }, kTimeout)) return ExitInfo{-2, -2};
    return Exits(pid).front();
  }

  bool WaitForLog(const std::string& path, const std::string& text) {
    return WaitFor([&] { return ReadFile(path).find(text) != std::string::npos; }, kTimeout);
  }

  std::string dir_, worker_;
  std::unique_ptr<WorkerSupervisor> supervisor_;
  absl::Mutex mu_;
  std::map<pid_t, std::vector<ExitInfo>> exits_ ABSL_GUARDED_BY(mu_);
};

TEST_F(WorkerSupervisorTest, ReportsExitCodeAndCapturesOutput) {
  LaunchSpec spec = Worker({"--steps=3", "--exit_code=3"});
  pid_t pid = Launch(spec);
  EXPECT_EQ(WaitForExit(pid), Exited(3));
  // The worker left nothing behind, so its log was complete when the exit was reported.
  std::string log = ReadFile(spec.log_path);
  EXPECT_NE(log.find(absl::StrCat("test_worker: started pid=", pid)), std::string::npos) << log;
  EXPECT_NE(log.find("test_worker: step 3 loss="), std::string::npos) << log;
  EXPECT_NE(log.find("test_worker: exiting with 3"), std::string::npos) << log;
  EXPECT_THAT(supervisor_->Running(), Not(Contains(pid)));
  EXPECT_TRUE(absl::IsNotFound(supervisor_->Stop(pid, absl::Seconds(1))));
  EXPECT_THAT(Exits(pid), ElementsAre(Exited(3)));  // Once only.
  EXPECT_EQ(Exits(pid)[0].last_line, "test_worker: exiting with 3");
}

TEST_F(WorkerSupervisorTest, ReportsTerminatingSignal) {
  pid_t pid = Launch(Worker({"--steps=1", "--crash"}));
  EXPECT_EQ(WaitForExit(pid), Killed(SIGSEGV));
  EXPECT_EQ(Exits(pid)[0].last_line, "test_worker: crashing");
}

TEST_F(WorkerSupervisorTest, ExecFailureExits127WithReasonInLog) {
  LaunchSpec spec;
  spec.argv = {dir_ + "/no-such-program", "--flag"};
  spec.log_path = dir_ + "/missing.log";
  pid_t pid = Launch(spec);
  EXPECT_EQ(WaitForExit(pid), Exited(127));
  std::string log = ReadFile(spec.log_path);
  EXPECT_NE(log.find("no-such-program"), std::string::npos) << log;
  EXPECT_NE(log.find("No such file or directory"), std::string::npos) << log;

  LaunchSpec bad_cwd = Worker({}, "bad_cwd");
  bad_cwd.cwd = dir_ + "/no-such-dir";
  pid = Launch(bad_cwd);
  EXPECT_EQ(WaitForExit(pid), Exited(127));
  log = ReadFile(bad_cwd.log_path);
  EXPECT_NE(log.find("cannot chdir to \"" + bad_cwd.cwd + "\""), std::string::npos) << log;
}

TEST_F(WorkerSupervisorTest, RejectsInvalidSpecs) {
  LaunchSpec spec = Worker({});
  spec.argv.clear();
  EXPECT_TRUE(absl::IsInvalidArgument(supervisor_->Launch(spec).status()));
  spec = Worker({});
  spec.max_log_bytes = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(supervisor_->Launch(spec).status()));
  spec = Worker({});
  spec.log_path = dir_ + "/no-such-dir/worker.log";
  EXPECT_TRUE(absl::IsNotFound(supervisor_->Launch(spec).status()));
  spec = Worker({});
  spec.oom_score_adj = 1001;
  absl::Status bad_score = supervisor_->Launch(spec).status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad_score)) << bad_score;
  EXPECT_THAT(bad_score.message(), HasSubstr("oom_score_adj must be in [-1000, 1000], got 1001"));
  EXPECT_THAT(supervisor_->Running(), IsEmpty());
}

TEST_F(WorkerSupervisorTest, SetsTheWorkersOomScoreAdjBeforeExec) {
  // Raising the value needs no privilege, so the test asks for one above its own.
  absl::StatusOr<int> own = ReadOomScoreAdj();
  ASSERT_TRUE(own.ok()) << own.status();
  if (*own == kMaxOomScoreAdj) GTEST_SKIP() << "this process's oom_score_adj is the maximum";
  LaunchSpec raised = Worker({"--hang"}, "raised");
  raised.oom_score_adj = *own + 1;
  const LaunchSpec inherited = Worker({"--hang"}, "inherited");
  const pid_t raised_pid = Launch(raised);
  const pid_t inherited_pid = Launch(inherited);
  ASSERT_TRUE(WaitForLog(raised.log_path, "test_worker: hanging"));
  ASSERT_TRUE(WaitForLog(inherited.log_path, "test_worker: hanging"));
  EXPECT_EQ(ReadOomScoreAdj(raised_pid).value_or(-2000), *own + 1);
  EXPECT_EQ(ReadOomScoreAdj(inherited_pid).value_or(-2000), *own);
  EXPECT_EQ(ReadFile(raised.log_path).find("cannot set oom_score_adj"), std::string::npos);
  EXPECT_TRUE(supervisor_->Stop(raised_pid, absl::ZeroDuration()).ok());
  EXPECT_TRUE(supervisor_->Stop(inherited_pid, absl::ZeroDuration()).ok());

  // A value the worker may not take (below this process's floor, without CAP_SYS_RESOURCE) is
  // said in its log, and the worker runs with the inherited one.
  if (SetOomScoreAdj(*own - 1).ok()) {
    (void)SetOomScoreAdj(*own);
    GTEST_SKIP() << "privileged: every value is allowed";
  }
  LaunchSpec lowered = Worker({"--hang"}, "lowered");
  lowered.oom_score_adj = *own - 1;
  const pid_t lowered_pid = Launch(lowered);
  ASSERT_TRUE(WaitForLog(lowered.log_path, "test_worker: hanging"));
  EXPECT_THAT(ReadFile(lowered.log_path),
              HasSubstr(absl::StrCat("cannot set oom_score_adj to \"", *own - 1, "\"")));
  EXPECT_EQ(ReadOomScoreAdj(lowered_pid).value_or(-2000), *own);
  EXPECT_TRUE(supervisor_->Stop(lowered_pid, absl::ZeroDuration()).ok());
}

TEST_F(WorkerSupervisorTest, PassesExactlyTheGivenEnvironmentDirectoryAndDescriptors) {
  LaunchSpec spec = Worker({"--print_env"});
  spec.env = {{"A", "1"}, {"EMPTY", ""}, {"SPACES", "x y=z"}};
  spec.cwd = dir_;
  pid_t pid = Launch(spec);
  EXPECT_EQ(WaitForExit(pid), Exited(0));
  std::string log = ReadFile(spec.log_path);
  size_t begin = log.find("test_worker: env begin\n");
  size_t end = log.find("test_worker: env end\n");
  ASSERT_NE(begin, std::string::npos) << log;
  ASSERT_NE(end, std::string::npos) << log;
  begin += std::string("test_worker: env begin\n").size();
  std::vector<std::string> env =
      absl::StrSplit(log.substr(begin, end - begin), '\n', absl::SkipEmpty());
  EXPECT_THAT(env, UnorderedElementsAre("A=1", "EMPTY=", "SPACES=x y=z"));
  std::string cwd = std::filesystem::canonical(dir_).string();
  EXPECT_NE(log.find("test_worker: cwd=" + cwd + "\n"), std::string::npos) << log;
  EXPECT_NE(log.find("test_worker: stdin=/dev/null\n"), std::string::npos) << log;
  // Nothing of the test process (or the supervisor's pipes of other workers) leaks in.
  EXPECT_NE(log.find("test_worker: open fds=0 1 2\n"), std::string::npos) << log;
}

TEST_F(WorkerSupervisorTest, WorkerStartsWithDefaultSignalsWhateverTheAgentBlocks) {
  // Like the agent: SIGTERM blocked (for sigwait) and SIGPIPE ignored (by gRPC).
  sigset_t term, old_mask;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, &old_mask), 0);
  struct sigaction ignore = {}, old_pipe = {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGPIPE, &ignore, &old_pipe), 0);
  LaunchSpec spec = Worker({"--print_env", "--hang"});
  pid_t pid = Launch(spec);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  sigaction(SIGPIPE, &old_pipe, nullptr);

  ASSERT_TRUE(WaitForLog(spec.log_path, "test_worker: hanging"));
  std::string log = ReadFile(spec.log_path);
  std::smatch blocked, ignored;
  ASSERT_TRUE(std::regex_search(log, blocked, std::regex("signals SigBlk=([0-9a-f]+)"))) << log;
  ASSERT_TRUE(std::regex_search(log, ignored, std::regex("signals SigIgn=([0-9a-f]+)"))) << log;
  EXPECT_EQ(std::stoull(blocked[1].str(), nullptr, 16), 0u) << log;
  // Bit N-1 is signal N. Signals 32 and 33 belong to the C library, which refuses to reset
  // them (and may find them ignored when the test runs under Bazel); all others must be reset.
  const uint64_t kLibcSignals = (1ull << 31) | (1ull << 32);
  EXPECT_EQ(std::stoull(ignored[1].str(), nullptr, 16) & ~kLibcSignals, 0u) << log;
  // So SIGTERM alone ends it.
  ASSERT_TRUE(supervisor_->Stop(pid, absl::Seconds(20)).ok());
  EXPECT_THAT(Exits(pid), ElementsAre(Killed(SIGTERM)));
}

TEST_F(WorkerSupervisorTest, RotatesTheLogWithinItsBound) {
  constexpr int64_t kMax = 16 << 10;
  LaunchSpec spec = Worker({"--print_bytes=200000"});
  spec.max_log_bytes = kMax;
  pid_t pid = Launch(spec);
  EXPECT_EQ(WaitForExit(pid), Exited(0));
  std::string rotated = spec.log_path + ".1";
  ASSERT_TRUE(std::filesystem::exists(rotated));
  EXPECT_GT(std::filesystem::file_size(rotated), 0u);
  EXPECT_LE(std::filesystem::file_size(rotated), kMax);
  EXPECT_LE(std::filesystem::file_size(spec.log_path), kMax);
  // The newest output is in the current file; the oldest has been rotated away.
  std::string log = ReadFile(spec.log_path);
  EXPECT_NE(log.find("test_worker: exiting with 0\n"), std::string::npos) << log.substr(0, 200);
  EXPECT_EQ((log + ReadFile(rotated)).find("filler 00000000 "), std::string::npos);
}

TEST_F(WorkerSupervisorTest, StopKillsAWorkerThatIgnoresSigterm) {
  LaunchSpec spec = Worker({"--ignore_sigterm", "--hang"});
  pid_t pid = Launch(spec);
  ASSERT_TRUE(WaitForLog(spec.log_path, "test_worker: hanging")) << ReadFile(spec.log_path);
  EXPECT_THAT(supervisor_->Running(), ElementsAre(pid));
  ASSERT_TRUE(supervisor_->Stop(pid, absl::Milliseconds(200)).ok());
  // Stop() returns after the exit was reported.
  EXPECT_THAT(Exits(pid), ElementsAre(Killed(SIGKILL)));
  EXPECT_TRUE(GroupGone(pid));
  EXPECT_THAT(supervisor_->Running(), IsEmpty());
  EXPECT_TRUE(absl::IsNotFound(supervisor_->Stop(pid, absl::Seconds(1))));
}

TEST_F(WorkerSupervisorTest, StopRemovesAStoppedWorker) {
  LaunchSpec spec = Worker({"--hang"});
  pid_t pid = Launch(spec);
  ASSERT_TRUE(WaitForLog(spec.log_path, "test_worker: hanging"));
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  ASSERT_TRUE(WaitFor(
      [&] {
        std::vector<std::string> stat = ProcStat(pid);
        return !stat.empty() && (stat[0] == "T" || stat[0] == "t");  // t: under a debugger.
      },
      kTimeout));
  // SIGCONT lets it act on SIGTERM well within the grace.
  ASSERT_TRUE(supervisor_->Stop(pid, absl::Seconds(20)).ok());
  EXPECT_THAT(Exits(pid), ElementsAre(Killed(SIGTERM)));
  EXPECT_TRUE(GroupGone(pid));
}

// What a stopped worker was doing is the line it printed before the stop, not its reaction to it.
TEST_F(WorkerSupervisorTest, AStoppedWorkersLastLineIsTheOneBeforeTheStop) {
  LaunchSpec spec = Worker({"--say_on_sigterm", "--hang"});
  pid_t pid = Launch(spec);
  // The pump gives the tail a chunk before it writes it to the file.
  ASSERT_TRUE(WaitForLog(spec.log_path, "test_worker: hanging"));
  ASSERT_TRUE(supervisor_->Stop(pid, absl::Seconds(20)).ok());
  ASSERT_THAT(Exits(pid), ElementsAre(Killed(SIGTERM)));
  EXPECT_TRUE(Exits(pid)[0].stopped);
  EXPECT_EQ(Exits(pid)[0].last_line, "test_worker: hanging");
  // The worker did react: its log has it.
  EXPECT_TRUE(WaitForLog(spec.log_path, "test_worker: got SIGTERM")) << ReadFile(spec.log_path);
  // A worker that ends by itself is not "stopped".
  pid = Launch(Worker({"--steps=1", "--crash"}, "crashes"));
  EXPECT_EQ(WaitForExit(pid), Killed(SIGSEGV));
  EXPECT_FALSE(Exits(pid)[0].stopped);
}

TEST_F(WorkerSupervisorTest, ACheckpointGraceSendsSigusr1AndSigtermOnlyIfTheWorkerStays) {
  // A worker that honours the request exits on its own, with its own code: no SIGTERM.
  LaunchSpec honours = Worker({"--sigusr1_exit_code=75", "--hang"}, "honours");
  pid_t pid = Launch(honours);
  ASSERT_TRUE(WaitForLog(honours.log_path, "test_worker: hanging"));
  ASSERT_TRUE(supervisor_->Stop(pid, absl::Seconds(60), absl::Seconds(60)).ok());
  EXPECT_THAT(Exits(pid), ElementsAre(Exited(75)));
  // One that ignores it gets SIGTERM once the checkpoint grace has passed.
  LaunchSpec ignores = Worker({"--ignore_sigusr1", "--hang"}, "ignores");
  pid = Launch(ignores);
  ASSERT_TRUE(WaitForLog(ignores.log_path, "test_worker: hanging"));
  ASSERT_TRUE(supervisor_->Stop(pid, absl::Seconds(60), absl::Milliseconds(200)).ok());
  EXPECT_THAT(Exits(pid), ElementsAre(Killed(SIGTERM)));
  EXPECT_TRUE(GroupGone(pid));
  // Without a checkpoint grace no SIGUSR1 is sent: the first kind of worker meets SIGTERM.
  LaunchSpec plain = Worker({"--sigusr1_exit_code=75", "--hang"}, "plain");
  pid = Launch(plain);
  ASSERT_TRUE(WaitForLog(plain.log_path, "test_worker: hanging"));
  ASSERT_TRUE(supervisor_->Stop(pid, absl::Seconds(60)).ok());
  EXPECT_THAT(Exits(pid), ElementsAre(Killed(SIGTERM)));
}

// An agent leaving during a drain: the drain's Stop() gives a long checkpoint grace, the leave's
// a short one (none here), and the worker is not done checkpointing. The leave's graces win: the
// drain's Stop() sends SIGTERM now instead of an hour from now, and both return.
TEST_F(WorkerSupervisorTest, ALaterStopWithShorterGracesBringsTheSignalsForward) {
  LaunchSpec spec = Worker({"--say_on_sigusr1", "--say_on_sigterm", "--hang"});
  pid_t pid = Launch(spec);
  ASSERT_TRUE(WaitForLog(spec.log_path, "test_worker: hanging"));
  absl::Status drain;
  std::thread drainer([&] { drain = supervisor_->Stop(pid, absl::Hours(1), absl::Hours(1)); });
  // Not an ASSERT: the drainer must be joined, and the second Stop() is what lets it return.
  EXPECT_TRUE(WaitForLog(spec.log_path, "test_worker: got SIGUSR1")) << ReadFile(spec.log_path);
  absl::Status leave = supervisor_->Stop(pid, absl::Hours(1));
  drainer.join();
  EXPECT_TRUE(drain.ok()) << drain;
  // The drain's Stop() did the work; the leave's found it gone (NOT_FOUND) or, woken between
  // the group emptying and the exit's report, finished it (OK), as concurrent stops do.
  EXPECT_TRUE(leave.ok() || absl::IsNotFound(leave)) << leave;
  EXPECT_THAT(Exits(pid), ElementsAre(Killed(SIGTERM)));
  EXPECT_TRUE(GroupGone(pid));

  // The SIGKILL too: a worker that ignores SIGTERM, in the middle of a drain with an hour for each
  // grace, is killed at once when a Stop() without graces comes.
  LaunchSpec stubborn = Worker({"--say_on_sigusr1", "--ignore_sigterm", "--hang"}, "stubborn");
  pid = Launch(stubborn);
  ASSERT_TRUE(WaitForLog(stubborn.log_path, "test_worker: hanging"));
  std::thread slow_drainer([&] { drain = supervisor_->Stop(pid, absl::Hours(1), absl::Hours(1)); });
  EXPECT_TRUE(WaitForLog(stubborn.log_path, "test_worker: got SIGUSR1"));
  absl::Status kill_now = supervisor_->Stop(pid, absl::ZeroDuration());
  slow_drainer.join();
  EXPECT_TRUE(drain.ok()) << drain;
  EXPECT_TRUE(kill_now.ok() || absl::IsNotFound(kill_now)) << kill_now;
  EXPECT_THAT(Exits(pid), ElementsAre(Killed(SIGKILL)));
  EXPECT_TRUE(GroupGone(pid));
}

TEST_F(WorkerSupervisorTest, StopRemovesForkedChildrenThatIgnoreSigterm) {
  LaunchSpec spec = Worker({"--ignore_sigterm", "--fork_children=2", "--hang"});
  pid_t pid = Launch(spec);
  std::vector<pid_t> children;
  ASSERT_TRUE(WaitFor(
      [&] {
        std::string log = ReadFile(spec.log_path);
        children = ChildPids(log);
        return children.size() == 2 && log.find("test_worker: hanging") != std::string::npos;
      },
      kTimeout))
      << ReadFile(spec.log_path);
  ASSERT_TRUE(supervisor_->Stop(pid, absl::Milliseconds(200)).ok());
  EXPECT_THAT(Exits(pid), ElementsAre(Killed(SIGKILL)));
  EXPECT_TRUE(GroupGone(pid));
  for (pid_t child : children) EXPECT_TRUE(ProcessGone(child)) << child;
  EXPECT_THAT(ChildrenOf(getpid()), IsEmpty());
}

TEST_F(WorkerSupervisorTest, ChildrenLeftByAnExitedWorkerAreAdoptedAndStopped) {
  LaunchSpec spec = Worker({"--fork_children=2"});
  pid_t pid = Launch(spec);
  EXPECT_EQ(WaitForExit(pid), Exited(0));
  // The children print their pids on their own schedule, possibly after the worker exited.
  std::vector<pid_t> children;
  ASSERT_TRUE(WaitFor(
      [&] {
        children = ChildPids(ReadFile(spec.log_path));
        return children.size() == 2;
      },
      kTimeout))
      << ReadFile(spec.log_path);
  // The subreaper adopted them, and the worker still counts as running while they live.
  for (pid_t child : children) {
    std::vector<std::string> stat = ProcStat(child);
    ASSERT_GT(stat.size(), 1u);
    EXPECT_EQ(stat[1], absl::StrCat(getpid())) << child;
  }
  EXPECT_THAT(supervisor_->Running(), ElementsAre(pid));

  ASSERT_TRUE(supervisor_->Stop(pid, absl::Seconds(20)).ok());
  EXPECT_TRUE(GroupGone(pid));
  for (pid_t child : children) EXPECT_TRUE(ProcessGone(child)) << child;
  EXPECT_THAT(ChildrenOf(getpid()), IsEmpty());
  EXPECT_THAT(supervisor_->Running(), IsEmpty());
  EXPECT_THAT(Exits(pid), ElementsAre(Exited(0)));
}

TEST_F(WorkerSupervisorTest, StopOfAnUnknownPidIsNotFound) {
  EXPECT_TRUE(absl::IsNotFound(supervisor_->Stop(getpid(), absl::Seconds(1))));
}

TEST_F(WorkerSupervisorTest, ConcurrentStopsBothReturnOnceTheGroupIsGone) {
  LaunchSpec spec = Worker({"--ignore_sigterm", "--hang"});
  pid_t pid = Launch(spec);
  ASSERT_TRUE(WaitForLog(spec.log_path, "test_worker: hanging"));
  absl::Status first, second;
  std::thread other([&] { second = supervisor_->Stop(pid, absl::Milliseconds(200)); });
  first = supervisor_->Stop(pid, absl::Milliseconds(200));
  other.join();
  EXPECT_TRUE(GroupGone(pid));
  // One of them did the work; the other found it done.
  EXPECT_TRUE(first.ok() || second.ok()) << first << " / " << second;
  EXPECT_TRUE(first.ok() || absl::IsNotFound(first)) << first;
  EXPECT_TRUE(second.ok() || absl::IsNotFound(second)) << second;
  EXPECT_THAT(Exits(pid), ElementsAre(Killed(SIGKILL)));
}

// A standby waits on kStandbyFd; activated, it reads its assignment and is a worker with the
// same pid, its output from before and after in the worker's log. Until then it is no worker,
// and its end (stopped or by itself) is never reported.
TEST_F(WorkerSupervisorTest, AStandbyBecomesAWorkerOnlyWhenActivated) {
  LaunchSpec standby;
  standby.argv = {"/bin/sh", "-c", "echo standby up; tr '\\000' '\\n' <&3; exit 7"};
  standby.env = {{"PATH", "/usr/bin:/bin"}};
  absl::StatusOr<pid_t> pid = supervisor_->StartStandby(standby);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_THAT(supervisor_->Running(), Not(Contains(*pid)));
  EXPECT_THAT(supervisor_->Standbys(), ElementsAre(*pid));
  LaunchSpec spec = Worker({}, "activated");
  spec.env = {{"RANK", "1"}, {"X", "a b"}};
  ASSERT_TRUE(supervisor_->ActivateStandby(*pid, spec).ok());
  EXPECT_THAT(supervisor_->Standbys(), IsEmpty());
  EXPECT_EQ(WaitForExit(*pid), Exited(7));
  EXPECT_EQ(ReadFile(spec.log_path), "standby up\nRANK=1\nX=a b\n");

  absl::StatusOr<pid_t> dropped = supervisor_->StartStandby(standby);
  absl::StatusOr<pid_t> died = supervisor_->StartStandby(standby);
  ASSERT_TRUE(dropped.ok() && died.ok());
  ASSERT_TRUE(supervisor_->StopStandby(*dropped).ok());
  EXPECT_TRUE(absl::IsNotFound(supervisor_->StopStandby(*dropped)));
  ASSERT_EQ(kill(*died, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return supervisor_->Standbys().empty(); }, kTimeout));
  EXPECT_TRUE(absl::IsNotFound(supervisor_->ActivateStandby(*died, spec)));
  EXPECT_THAT(Exits(*dropped), IsEmpty());
  EXPECT_THAT(Exits(*died), IsEmpty());
}

// The destructor kills the standbys left (TearDown checks that no child is left).
TEST_F(WorkerSupervisorTest, DestructorKillsTheStandbys) {
  LaunchSpec standby;
  standby.argv = {"/bin/sh", "-c", "read line <&3"};
  ASSERT_TRUE(supervisor_->StartStandby(standby).ok());
  ASSERT_TRUE(supervisor_->StartStandby(standby).ok());
  EXPECT_EQ(supervisor_->Standbys().size(), 2u);
}

TEST_F(WorkerSupervisorTest, DestructorStopsEveryWorker) {
  LaunchSpec plain = Worker({"--hang"}, "plain");
  LaunchSpec stubborn = Worker({"--ignore_sigterm", "--fork_children=1", "--hang"}, "stubborn");
  pid_t a = Launch(plain);
  pid_t b = Launch(stubborn);
  ASSERT_TRUE(WaitForLog(plain.log_path, "test_worker: hanging"));
  ASSERT_TRUE(WaitForLog(stubborn.log_path, "test_worker: hanging"));
  supervisor_.reset();
  EXPECT_TRUE(GroupGone(a));
  EXPECT_TRUE(GroupGone(b));
  EXPECT_EQ(Exits(a).size(), 1u);
  EXPECT_THAT(Exits(b), ElementsAre(Killed(SIGKILL)));
  EXPECT_THAT(ChildrenOf(getpid()), IsEmpty());
}

// A fake agent side of the worker API that records what workers say.
class FakeWorkerService final : public v1::WorkerService::Service {
 public:
  grpc::Status RendezvousSet(grpc::ServerContext*, const v1::RendezvousSetRequest* request,
                             v1::RendezvousSetResponse*) override {
    absl::MutexLock lock(&mu_);
    store_[request->key()] = request->value();
    return grpc::Status::OK;
  }
  grpc::Status RendezvousGet(grpc::ServerContext*, const v1::RendezvousGetRequest* request,
                             v1::RendezvousGetResponse* response) override {
    absl::MutexLock lock(&mu_);
    auto it = store_.find(request->key());
    if (it == store_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, request->key());
    response->set_value(it->second);
    return grpc::Status::OK;
  }
  grpc::Status RendezvousWait(grpc::ServerContext*, const v1::RendezvousWaitRequest* request,
                              v1::RendezvousGetResponse* response) override {
    absl::MutexLock lock(&mu_);
    auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return store_.count(request->key()) > 0;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&present),
                              absl::Seconds(request->timeout_seconds()))) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, request->key());
    }
    response->set_value(store_[request->key()]);
    return grpc::Status::OK;
  }
  grpc::Status ReportStep(grpc::ServerContext*, const v1::ReportStepRequest* request,
                          v1::ReportResponse*) override {
    absl::MutexLock lock(&mu_);
    steps_.push_back(*request);
    return grpc::Status::OK;
  }
  grpc::Status ReportPhase(grpc::ServerContext*, const v1::ReportPhaseRequest* request,
                           v1::ReportResponse*) override {
    absl::MutexLock lock(&mu_);
    phases_[request->worker().rank()].push_back(request->phase());
    return grpc::Status::OK;
  }
  grpc::Status ReportExit(grpc::ServerContext*, const v1::ReportExitRequest* request,
                          v1::ReportResponse*) override {
    absl::MutexLock lock(&mu_);
    exits_.push_back(*request);
    return grpc::Status::OK;
  }

  absl::Mutex mu_;
  std::map<std::string, std::string> store_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportStepRequest> steps_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::vector<int>> phases_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportExitRequest> exits_ ABSL_GUARDED_BY(mu_);
};

TEST_F(WorkerSupervisorTest, WorkersReachTheWorkerApiThroughTheirEnvironment) {
  FakeWorkerService service;
  // A Unix socket path has at most 107 characters, fewer than $TEST_TMPDIR may take.
  char socket_dir[] = "/tmp/rm-worker-api-XXXXXX";
  ASSERT_NE(mkdtemp(socket_dir), nullptr) << strerror(errno);
  std::string socket = std::string(socket_dir) + "/agent.sock";
  GrpcServerOptions options;
  options.address = "unix:" + socket;
  options.credentials = grpc::InsecureServerCredentials();
  options.services = {&service};
  auto server = GrpcServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();

  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    LaunchSpec spec = Worker({"--steps=3", "--rendezvous"}, absl::StrCat("rank-", rank));
    spec.env = {{"RINGMASTER_AGENT_SOCKET", socket},
                {"RINGMASTER_JOB", "job-1"},
                {"RINGMASTER_GENERATION", "2"},
                {"RANK", absl::StrCat(rank)}};
    pids.push_back(Launch(spec));
  }
  for (pid_t pid : pids) EXPECT_EQ(WaitForExit(pid), Exited(0)) << pid;
  EXPECT_NE(ReadFile(dir_ + "/rank-1.log").find("test_worker: rendezvous hello=world"),
            std::string::npos)
      << ReadFile(dir_ + "/rank-1.log");

  absl::MutexLock lock(&service.mu_);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(service.phases_[rank], ElementsAre(v1::WORKER_PHASE_INIT, v1::WORKER_PHASE_STEP));
    double last_loss = 1e9;
    int64_t next_step = 1;
    for (const v1::ReportStepRequest& step : service.steps_) {
      if (step.worker().rank() != rank) continue;
      EXPECT_EQ(step.worker().job_id(), "job-1");
      EXPECT_EQ(step.worker().generation(), 2);
      EXPECT_EQ(step.step(), next_step++);
      EXPECT_LT(step.loss(), last_loss);
      last_loss = step.loss();
      EXPECT_GT(step.tokens(), 0);
      EXPECT_NEAR(step.compute_seconds() + step.comm_seconds(), step.step_seconds(), 1e-9);
    }
    EXPECT_EQ(next_step, 4) << "rank " << rank;
  }
  ASSERT_EQ(service.exits_.size(), 2u);
  for (const v1::ReportExitRequest& exit : service.exits_) EXPECT_EQ(exit.exit_code(), 0);
  EXPECT_EQ(service.store_["hello"], "world");
  std::filesystem::remove_all(socket_dir);
}

}  // namespace
}  // namespace ringmaster::agent
