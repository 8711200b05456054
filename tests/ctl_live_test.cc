// `ringctl watch` and `ringctl top` in real pseudo-terminals against a live local cluster (a
// coordinator, an agent, a two-rank test_worker job of 24 steps of 0.25 s): the watch keeps one
// status block redrawn in place (cursor up + erase line between renders, the bar advancing) and
// ends with the final state under the job's end; top clears and redraws its per-rank table and
// ends on the final state with the ranks as last seen.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kEraseLine[] = "\x1b[1A\x1b[2K";
constexpr char kClearScreen[] = "\x1b[H\x1b[2J";
// The job's steps: about 6 s of 0.25 s steps, so that the 1 s watch renders RUNNING at least
// twice with different steps also under a sanitizer on a busy host.
constexpr int kSteps = 24;

// A program running in a pseudo-terminal of 150 x 40, TERM=xterm, talking plaintext to
// `coordinator`, and the bytes its terminal received (the line discipline's "\r\n" read as "\n").
struct PtyProgram {
  pid_t pid = -1;
  int master = -1;
  std::string screen;
  bool eof = false;
  int exit_code = -1;
};

PtyProgram StartInPty(const std::vector<std::string>& argv, const std::string& coordinator) {
  PtyProgram p;
  winsize size{};
  size.ws_col = 150;
  size.ws_row = 40;
  // argv and the environment are built before the fork: the test has threads (the cluster's),
  // so the child may call only async-signal-safe functions before exec (setenv may allocate,
  // and another thread may have held the allocator's lock at the fork).
  const std::vector<std::string> overrides = {"TERM=xterm", "RINGMASTER_COORDINATOR=" + coordinator,
                                              "RINGMASTER_INSECURE=1"};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('=') + 1);
    bool overridden = false;
    for (const std::string& o : overrides) overridden |= o.rfind(name, 0) == 0;
    if (!overridden) env.push_back(entry);
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  p.pid = forkpty(&p.master, nullptr, nullptr, &size);
  if (p.pid == 0) {
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  if (p.master >= 0) fcntl(p.master, F_SETFL, fcntl(p.master, F_GETFL) | O_NONBLOCK);
  return p;
}

// Reads every program's terminal until each has closed it (EIO once the program and its
// children exited) or `deadline`; then reaps them (killing those still running).
void ReadUntilExit(std::vector<PtyProgram*> programs, absl::Time deadline) {
  char buffer[4096];
  for (int rounds = 0; rounds < 1000000 && absl::Now() < deadline; ++rounds) {
    std::vector<pollfd> fds;
    std::vector<PtyProgram*> open;
    for (PtyProgram* p : programs) {
      if (!p->eof && p->master >= 0) {
        fds.push_back({p->master, POLLIN, 0});
        open.push_back(p);
      }
    }
    if (fds.empty()) break;
    const int timeout_ms =
        static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now())));
    if (poll(fds.data(), fds.size(), std::min(timeout_ms, 1000)) < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const ssize_t n = read(open[i]->master, buffer, sizeof(buffer));
      if (n > 0) {
        open[i]->screen.append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        open[i]->eof = true;
      }
    }
  }
  for (PtyProgram* p : programs) {
    if (p->pid <= 0) continue;
    int status = 0;
    if (waitpid(p->pid, &status, WNOHANG) == 0) {  // still running past the deadline
      kill(p->pid, SIGKILL);
      waitpid(p->pid, &status, 0);
    }
    p->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (p->master >= 0) close(p->master);
    p->screen = absl::StrReplaceAll(p->screen, {{"\r\n", "\n"}});
  }
}

// The steps of the RUNNING block renders, in order ("RUNNING gen 1  [###...]  25%  step 6/24").
std::vector<int> RunningSteps(const std::string& screen) {
  std::vector<int> steps;
  static const std::regex kRender(
      absl::StrCat(R"(RUNNING gen 1  \[[#.]{20}\] +\d+%  step (\d+)/)", kSteps));
  for (auto it = std::sregex_iterator(screen.begin(), screen.end(), kRender);
       it != std::sregex_iterator(); ++it) {
    steps.push_back(std::stoi((*it)[1].str()));
  }
  return steps;
}

TEST(CtlLiveTest, WatchAndTopUpdateInPlaceAndEndWithTheFinalState) {
  TestClusterOptions options;
  options.agents = 1;
  options.slots = 2;
  auto cluster = TestCluster::Start(TestTempDir() + "/ctl_live", options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  TestCluster& c = **cluster;
  const std::string worker = TestCluster::Runfile("agent/testing/test_worker");
  const std::string id =
      c.Submit("live", absl::StrCat("name: live\nnodes: 1\ndevices_per_node: 2\n",
                                    "parallelism: {tensor: 1, pipeline: 1, data: 2}\n",
                                    "restart: {max_restarts: 0}\ntrainer:\n  steps: ", kSteps,
                                    "\n  command: [\"", worker, "\", \"--steps=", kSteps,
                                    "\", \"--step_seconds=0.25\"]\n"));
  ASSERT_FALSE(id.empty());
  const std::string ringctl = TestCluster::Runfile("ctl/ringctl");
  PtyProgram watch = StartInPty({ringctl, "watch", id}, c.coordinator().address());
  PtyProgram top = StartInPty({ringctl, "top", id, "--interval=0.3"}, c.coordinator().address());
  ASSERT_GT(watch.pid, 0);
  ASSERT_GT(top.pid, 0);
  ReadUntilExit({&watch, &top}, absl::Now() + absl::Seconds(90));

  // watch: the block is redrawn in place, the bar advancing, and the final state stays last.
  EXPECT_EQ(watch.exit_code, 0) << watch.screen;
  EXPECT_THAT(watch.screen, HasSubstr(kEraseLine));
  const std::vector<int> steps = RunningSteps(watch.screen);
  ASSERT_GE(steps.size(), 2u) << watch.screen;
  EXPECT_LT(steps.front(), steps.back()) << watch.screen;
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_LE(steps[i - 1], steps[i]) << watch.screen;
  // Every render after the first is preceded by the erase of the previous block (two lines).
  const size_t first_render = watch.screen.find("RUNNING gen 1  [");
  const size_t second_render = watch.screen.find("RUNNING gen 1  [", first_render + 1);
  ASSERT_NE(second_render, std::string::npos);
  EXPECT_NE(watch.screen.substr(first_render, second_render - first_render)
                .find(absl::StrCat(kEraseLine, kEraseLine)),
            std::string::npos)
      << watch.screen;
  const std::string last = watch.screen.substr(watch.screen.rfind(kEraseLine) + 8);
  EXPECT_THAT(last, HasSubstr(absl::StrCat("job ", id, " ended SUCCEEDED\n",
                                           "SUCCEEDED gen 1  [####################]  100%  step ",
                                           kSteps, "/", kSteps, "  ETA 0s\nloss ")))
      << watch.screen;
  EXPECT_EQ(last.back(), '\n');
  EXPECT_THAT(last.substr(last.rfind("\nloss ")), HasSubstr("restarts 0\n"));

  // top: cleared and redrawn at each refresh; the ranks' figures; the final state last.
  EXPECT_EQ(top.exit_code, 0) << top.screen;
  const size_t clears = [&] {
    size_t n = 0;
    for (size_t at = top.screen.find(kClearScreen); at != std::string::npos;
         at = top.screen.find(kClearScreen, at + 1)) {
      ++n;
    }
    return n;
  }();
  EXPECT_GE(clears, 2u) << top.screen;
  EXPECT_THAT(top.screen, HasSubstr("RANK  NODE     STEP  STEP-P50  STEP-P99  COMPUTE"));
  EXPECT_TRUE(std::regex_search(top.screen,
                                std::regex(R"(\n1 +agent-0 +\d+ +\d+\.\d{3}s +\d+\.\d{3}s +80%)")))
      << top.screen;
  const std::string final_screen = top.screen.substr(top.screen.rfind(kClearScreen) + 7);
  EXPECT_THAT(final_screen, HasSubstr(absl::StrCat("job ", id,
                                                   "  SUCCEEDED gen 1  [####################]  "
                                                   "100%  step ",
                                                   kSteps, "/", kSteps)))
      << top.screen;
  EXPECT_THAT(final_screen, HasSubstr("ranks as last seen while the job ran:\nRANK  NODE"))
      << top.screen;

  // Piped: plain text, no escapes; for a job that ended, its final state at once.
  const CommandResult piped = c.Ctl({"top", id});
  EXPECT_EQ(piped.exit_code, 0) << piped.output;
  EXPECT_EQ(piped.output.find('\x1b'), std::string::npos) << piped.output;
  EXPECT_THAT(piped.output, HasSubstr(absl::StrCat("SUCCEEDED gen 1  [####################]  "
                                                   "100%  step ",
                                                   kSteps, "/", kSteps)));
  EXPECT_THAT(piped.output, HasSubstr("no ranks running (SUCCEEDED"));
  const CommandResult bad = c.Ctl({"top", id, "--interval=0"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("--interval: must be > 0 seconds, got 0"));
}

}  // namespace
}  // namespace ringmaster::testing
