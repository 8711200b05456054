// A coordinator and two real agents (--devices=cpu:2) on loopback run command jobs of the test
// worker across both nodes: success, a SIGKILLed worker that makes the job restart with a new
// generation, stale-generation fencing on the worker API, and cancellation that leaves no
// worker behind. The agents' /metrics pages pass promtool.
#include "tests/agent_cluster_fixture.h"

namespace ringmaster::testing {
namespace {

// Workers that fail before their first step, generation after generation: the coordinator waits
// longer before each relaunch (crash-loop backoff; 1 s, then 2 s by default), says so in the
// events, and fails the job once its restarts run out.
TEST_F(AgentClusterTest, CrashLoopBacksOffThenFailsWhenRestartsRunOut) {
  CommandResult run = Ctl({"submit", "-f", JobFile("loop", "\"--exit_code=1\"", 3), "--wait"});
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("restart 1 of 3\n"), std::string::npos) << run.output;
  // The reason each worker gave through the worker API before exiting says why.
  EXPECT_NE(run.output.find("exited with code 1: asked to fail; restart 1 of 3"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("restart 2 of 3 in 1s (crash loop: 2 generations in a row failed "
                            "before their first step)"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("restart 3 of 3 in 2s (crash loop: 3"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("(3 of 3 restarts used)"), std::string::npos) << run.output;
}

TEST_F(AgentClusterTest, JobAcrossTwoAgentsSucceedsWithRendezvousAndReports) {
  std::string file =
      JobFile("steps", "\"--steps=3\", \"--step_seconds=0.01\", \"--rendezvous\"", 0);
  CommandResult run = Ctl({"submit", "-f", file, "--wait"});
  EXPECT_EQ(run.exit_code, 0) << run.output << agents_[0].Log();
  EXPECT_NE(run.output.find("placed 4 ranks on 2 nodes"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("SUCCEEDED: all 4 ranks finished"), std::string::npos) << run.output;

  // Each rank got the torchrun-style environment and read rank 0's rendezvous value.
  std::smatch m;
  std::regex id_re("job (\\S+) submitted");
  ASSERT_TRUE(std::regex_search(run.output, m, id_re));
  std::string id = m[1].str();
  int found = 0;
  for (const auto& work : work_dirs_) {
    for (int rank = 0; rank < 4; ++rank) {
      std::string log = ReadFile(absl::StrCat(work, "/logs/", id, "/1/rank-", rank, ".log"));
      if (log.empty()) continue;
      ++found;
      EXPECT_NE(log.find("test_worker: started"), std::string::npos) << log;
      if (rank > 0) {
        EXPECT_NE(log.find("world"), std::string::npos) << log;
      }
    }
  }
  EXPECT_EQ(found, 4);

  // `ringctl logs` reads a rank's output through the coordinator from whichever agent runs it.
  for (int rank : {0, 3}) {
    CommandResult logs = Ctl({"logs", id, absl::StrCat("--rank=", rank)});
    EXPECT_EQ(logs.exit_code, 0) << logs.output;
    EXPECT_NE(logs.output.find("test_worker: started"), std::string::npos) << logs.output;
  }
  CommandResult bad_rank = Ctl({"logs", id, "--rank=9"});
  EXPECT_EQ(bad_rank.exit_code, 1);
  EXPECT_NE(bad_rank.output.find(absl::StrCat("--rank: job ", id, " has ranks 0 to 3, got 9")),
            std::string::npos)
      << bad_rank.output;

  // Each agent's /metrics passes promtool.
  for (auto& agent : agents_) {
    int port = MetricsPort(agent);
    ASSERT_GT(port, 0) << agent.Log();
    auto page = HttpGet("127.0.0.1", port, "/metrics");
    ASSERT_TRUE(page.ok());
    EXPECT_NE(page->body.find("ringmaster_agent_connected 1"), std::string::npos) << page->body;
    ExpectPromtoolClean(page->body);
  }
  // The agents say when they queued each heartbeat: the coordinator times how late it read them.
  std::string page;
  EXPECT_TRUE(WaitFor(
      [&] {
        auto got = HttpGet("127.0.0.1", coordinator_->metrics_port, "/metrics");
        page = got.ok() ? got->body : "";
        return absl::StrContains(page, "\nringmaster_heartbeat_delay_seconds_count ") &&
               !absl::StrContains(page, "\nringmaster_heartbeat_delay_seconds_count 0\n");
      },
      absl::Seconds(30)))
      << page;
}

TEST_F(AgentClusterTest, KilledWorkerRestartsTheJobAndOldGenerationIsFenced) {
  std::string id = Submit(JobFile("long", "\"--steps=100000\", \"--step_seconds=0.05\"", 1));
  pid_t victim = 0;
  ASSERT_TRUE(WaitFor([&] { return (victim = WorkerPid(id, 1, 2)) > 0; }, absl::Seconds(30)));
  ASSERT_EQ(kill(victim, SIGKILL), 0);

  ASSERT_TRUE(WaitFor([&] { return WorkerPid(id, 2, 2) > 0; }, absl::Seconds(60)))
      << Ctl({"describe", "job", id}).output;
  std::string described = Ctl({"describe", "job", id}).output;
  EXPECT_NE(described.find("rank 2 on agent-"), std::string::npos) << described;
  // With what it printed last ("ready", or a step), as it gave no reason of its own.
  EXPECT_NE(described.find("killed by signal 9: last output: test_worker: "), std::string::npos)
      << described;
  EXPECT_NE(described.find("RESTARTING"), std::string::npos) << described;
  EXPECT_NE(described.find("(generation 2)"), std::string::npos) << described;

  // While the job runs, the agents export its per-rank series, and the pages pass promtool.
  bool seen_step = false;
  for (auto& agent : agents_) {
    int port = MetricsPort(agent);
    ASSERT_GT(port, 0) << agent.Log();
    std::string series = absl::StrCat("ringmaster_step{job_id=\"", id, "\"");
    std::string body;
    if (WaitFor(
            [&] {
              auto page = HttpGet("127.0.0.1", port, "/metrics");
              body = page.ok() ? page->body : "";
              return body.find(series) != std::string::npos;
            },
            absl::Seconds(20))) {
      seen_step = true;
      EXPECT_NE(body.find("ringmaster_step_seconds_bucket{job_id=\"" + id), std::string::npos);
      ExpectPromtoolClean(body);
    }
  }
  EXPECT_TRUE(seen_step);

  // The answers of both agents to `base` as a step report of every rank in `generation`, with
  // the token of rank (rank + token_shift) % 4 (none when token_shift < 0).
  const auto report_everywhere = [&](int generation, const v1::ReportStepRequest& base,
                                     int token_shift) {
    std::vector<grpc::Status> answers;
    for (const auto& socket : sockets_) {
      auto stub = v1::WorkerService::NewStub(
          MakeChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
      for (int rank = 0; rank < 4; ++rank) {
        grpc::ClientContext context;
        v1::ReportStepRequest report = base;
        report.mutable_worker()->set_job_id(id);
        report.mutable_worker()->set_generation(generation);
        report.mutable_worker()->set_rank(rank);
        if (token_shift >= 0) {
          report.mutable_worker()->set_token(WorkerToken(id, generation, (rank + token_shift) % 4));
        }
        v1::ReportResponse response;
        answers.push_back(stub->ReportStep(&context, report, &response));
      }
    }
    return answers;
  };
  // A stale generation-1 identity is refused by the agent's worker API; a caller without a
  // worker's token is told nothing of the node's jobs (any local process can connect).
  v1::ReportStepRequest stale;
  stale.set_step(1);
  for (const grpc::Status& status : report_everywhere(1, stale, -1)) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(status.error_message(), HasSubstr("worker.token: missing"));
    EXPECT_THAT(status.error_message(), Not(HasSubstr(id)));
  }
  // A live rank's identity without the rank's token, or with another rank's, is refused.
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(WaitFor([&] { return !WorkerToken(id, 2, rank).empty(); }, absl::Seconds(30)))
        << "rank " << rank << " of generation 2 never started";
  }
  v1::ReportStepRequest forged;
  forged.set_step(1);
  // Refused without naming the job, generation or rank; only a caller holding the token of a
  // worker of the job on that agent (another rank's, on the agent the rank does not run on) is
  // told the rank does not run there.
  for (const auto& [token_shift, got] :
       {std::pair{-1, "worker.token: missing"},
        {1, "worker.token: not the RINGMASTER_WORKER_TOKEN"}}) {
    int denied = 0;
    for (const grpc::Status& status : report_everywhere(2, forged, token_shift)) {
      if (status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
        ++denied;
        EXPECT_THAT(status.error_message(), HasSubstr(got));
        EXPECT_THAT(status.error_message(), Not(HasSubstr(id)));
      } else {
        EXPECT_EQ(token_shift, 1) << status.error_message();
        EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
      }
    }
    EXPECT_GE(denied, 4) << got;
    if (token_shift < 0) {
      EXPECT_EQ(denied, 8);
    }
  }
  // A live worker's report with a label that would become a junk series is refused, naming it.
  v1::ReportStepRequest bad;
  bad.set_step(1000000);
  v1::CollectiveStat* stat = bad.add_collectives();
  stat->set_op("all_reduce");
  stat->set_group("dp0 step=1000000");
  int refused = 0;
  for (const grpc::Status& status : report_everywhere(2, bad, 0)) {
    if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      ++refused;
      EXPECT_NE(status.error_message().find("collectives[0].group: must be 1 to 64 characters"),
                std::string::npos)
          << status.error_message();
    } else {  // the rank runs on the other agent, which does not know its token
      EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    }
  }
  EXPECT_EQ(refused, 4);

  // Cancelling removes every worker; nothing is left running.
  EXPECT_EQ(Ctl({"cancel", id}).exit_code, 0);
  std::vector<pid_t> gen2;
  for (int rank = 0; rank < 4; ++rank) gen2.push_back(WorkerPid(id, 2, rank));
  ASSERT_TRUE(WaitFor(
      [&] {
        for (pid_t p : gen2) {
          if (p > 0 && kill(p, 0) == 0) return false;
        }
        return true;
      },
      absl::Seconds(30)));
  // And the nodes no longer hold devices for it.
  EXPECT_EQ(Ctl({"nodes"}).output.find(id), std::string::npos);
}

// Two jobs never share a device: a cancelled job's workers that ignore SIGTERM keep theirs for
// the stop grace (2 s), and the next job, placed on the same devices (the coordinator freed
// them at the cancel), starts on each agent only once they are gone.
TEST_F(AgentClusterTest, ALaunchWaitsUntilTheStoppingWorkersOnItsDevicesAreGone) {
  // Whether every rank of generation 1 of `job` logged `line`.
  const auto every_rank_logged = [&](const std::string& job, const std::string& line) {
    for (int rank = 0; rank < 4; ++rank) {
      bool logged = false;
      for (const auto& work : work_dirs_) {
        logged = logged ||
                 ReadFile(absl::StrCat(work, "/logs/", job, "/1/rank-", rank, ".log")).find(line) !=
                     std::string::npos;
      }
      if (!logged) return false;
    }
    return true;
  };
  const std::string first = Submit(JobFile("first", "\"--ignore_sigterm\", \"--hang\"", 0));
  ASSERT_FALSE(first.empty());
  ASSERT_TRUE(
      WaitFor([&] { return every_rank_logged(first, "test_worker: hanging"); }, absl::Seconds(30)));
  std::vector<pid_t> stopping;
  for (int rank = 0; rank < 4; ++rank) stopping.push_back(WorkerPid(first, 1, rank));
  ASSERT_EQ(Ctl({"cancel", first}).exit_code, 0);
  const std::string second = Submit(JobFile("second", "\"--hang\"", 0));
  ASSERT_FALSE(second.empty());
  ASSERT_TRUE(WaitFor([&] { return every_rank_logged(second, "test_worker: started"); },
                      absl::Seconds(30)));
  for (pid_t pid : stopping) {
    ASSERT_GT(pid, 0);
    EXPECT_NE(kill(pid, 0), 0) << "pid " << pid << " of " << first << " still runs";
  }
  EXPECT_EQ(Ctl({"cancel", second}).exit_code, 0);
}

TEST_F(AgentClusterTest, KilledAgentTakesItsWorkersAlongAndTheJobRestartsWhenItReturns) {
  std::string id = Submit(JobFile("agentloss", "\"--steps=100000\", \"--step_seconds=0.05\"", 2));
  std::vector<pid_t> gen1;
  ASSERT_TRUE(WaitFor(
      [&] {
        gen1.clear();
        for (int rank = 0; rank < 4; ++rank) gen1.push_back(WorkerPid(id, 1, rank));
        return std::count(gen1.begin(), gen1.end(), 0) == 0;
      },
      absl::Seconds(30)));

  // SIGKILL agent-1 only (its workers are in process groups of their own).
  agents_[1].Signal(SIGKILL);
  ASSERT_TRUE(agents_[1].Wait(absl::Seconds(30)).ok());
  // Its workers die with it; the coordinator loses the node and the job waits for capacity.
  ASSERT_TRUE(WaitFor(
      [&] {
        std::string described = Ctl({"describe", "job", id}).output;
        return described.find("node agent-1 was lost") != std::string::npos;
      },
      absl::Seconds(30)));
  for (int rank = 0; rank < 4; ++rank) {
    // Every generation-1 worker is gone: agent-1's by PR_SET_PDEATHSIG, agent-0's by StopWorkers.
    ASSERT_TRUE(WaitFor([&] { return kill(gen1[rank], 0) != 0; }, absl::Seconds(30)))
        << "rank " << rank << " pid " << gen1[rank] << " survived";
  }

  // agent-1 comes back: the job is placed again as generation 2.
  auto start_agent_1 = [&](const std::string& log) {
    auto again = Subprocess::Start(
        {"agent/agent", "--insecure", "--coordinator=" + coordinator_->address(),
         "--node_name=agent-1", "--devices=cpu:2", "--work_dir=" + work_dirs_[1],
         "--worker_socket=" + sockets_[1], "--metrics_listen=127.0.0.1:0", "--stop_grace=2"},
        work_dirs_[1] + log);
    ASSERT_TRUE(again.ok());
    agents_[1] = std::move(*again);
  };
  ASSERT_NO_FATAL_FAILURE(start_agent_1("-again.log"));
  ASSERT_TRUE(WaitFor([&] { return WorkerPid(id, 2, 3) > 0 && WorkerPid(id, 2, 0) > 0; },
                      absl::Seconds(60)))
      << Ctl({"describe", "job", id}).output;
  EXPECT_EQ(Ctl({"nodes"}).output.find("SETTLING"), std::string::npos) << "one loss is no flap";

  // Lost a second time (the job fails over to no node: it waits), and back: agent-1 is settling
  // (flap damping; --flap_hold is 30 min here, so it still is when ringctl asks). A restart must
  // happen, so the job is still placed on it: generation 3.
  agents_[1].Signal(SIGKILL);
  ASSERT_TRUE(agents_[1].Wait(absl::Seconds(30)).ok());
  ASSERT_TRUE(WaitFor(
      [&] { return Ctl({"nodes"}).output.find("LOST") != std::string::npos; },
      absl::Seconds(30)));
  ASSERT_NO_FATAL_FAILURE(start_agent_1("-third.log"));
  std::string nodes;
  ASSERT_TRUE(WaitFor(
      [&] {
        nodes = Ctl({"nodes"}).output;
        return nodes.find("SETTLING") != std::string::npos;
      },
      absl::Seconds(30)))
      << nodes;
  EXPECT_NE(nodes.find("agent-1: lost 2 times lately: settling for "), std::string::npos) << nodes;
  ASSERT_TRUE(WaitFor([&] { return WorkerPid(id, 3, 3) > 0 && WorkerPid(id, 3, 0) > 0; },
                      absl::Seconds(60)))
      << Ctl({"describe", "job", id}).output;
  EXPECT_EQ(Ctl({"cancel", id}).exit_code, 0);
}

TEST_F(AgentClusterTest, HungWorkerIsNamedAndTheJobRestarts) {
  // Every rank reports two steps, then stops reporting (--hang); with a 1 s
  // hang timeout the agents' watchdogs report them, and the coordinator names a rank and
  // restarts the job (then fails it: no restart left in generation 2).
  std::string path = dir_ + "/hang.yaml";
  std::ofstream(path) << "name: hang\nnodes: 2\ndevices_per_node: 2\n"
                      << "trainer:\n  command: [\"" << worker_
                      << "\", \"--steps=2\", \"--step_seconds=0.01\", \"--hang\"]\n"
                      << "  steps: 2\n"
                      << "restart: {max_restarts: 1}\n"
                      << "watchdog: {hang_timeout: 1}\n";
  CommandResult run = Ctl({"submit", "-f", path, "--wait"});
  EXPECT_EQ(run.exit_code, 1) << run.output;  // FAILED after its one restart.
  EXPECT_NE(run.output.find("  hang  rank "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("made no progress for"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("in phase step: hung"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("(generation 2)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("FAILED"), std::string::npos) << run.output;
}

// Agents whose workers get 1 s to make their first report (--hang_init_timeout=1).
class AgentShortInitTest : public AgentClusterTest {
 protected:
  std::vector<std::string> ExtraAgentFlags() const override { return {"--hang_init_timeout=1"}; }

  // A job with one rank on each agent running `argv`.
  std::string SubmitOnBothAgents(const std::string& name, const std::vector<std::string>& argv) {
    std::string path = dir_ + "/" + name + ".yaml";
    std::ofstream(path) << "name: " << name << "\nnodes: 2\ndevices_per_node: 1\n"
                        << "trainer:\n  command: [\"" << absl::StrJoin(argv, "\", \"")
                        << "\"]\n  steps: 1\n";
    return Submit(path);
  }
};

// An unmodified program never calls the worker API, so its silence says nothing: the agents do
// not declare it hung, however long it runs without a word. A test worker that reports and then
// falls silent on the same agents, started after it, is declared hung: each agent checks all its
// ranks at once, so by the time that rank's hang is logged the silent program's would have been.
TEST_F(AgentShortInitTest, ACommandThatNeverUsesTheWorkerApiIsNotHung) {
  const std::string go = dir_ + "/go";
  const std::string quiet = SubmitOnBothAgents(
      "quiet", {"/bin/sh", "-c", "while [ ! -e " + go + " ]; do sleep 0.05; done"});
  ASSERT_FALSE(quiet.empty());
  ASSERT_TRUE(WaitFor(
      [&] {
        return Ctl({"get", "job", quiet}).output.find("RUNNING") != std::string::npos;
      },
      absl::Seconds(30)));
  const std::string talker = SubmitOnBothAgents("talker", {worker_, "--steps=0", "--hang"});
  ASSERT_FALSE(talker.empty());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(WaitFor(
        [&] { return agents_[i].Log().find("of " + talker + " silent for") != std::string::npos; },
        absl::Seconds(60)))
        << agents_[i].Log();
    EXPECT_EQ(agents_[i].Log().find("of " + quiet + " silent for"), std::string::npos)
        << agents_[i].Log();
  }
  EXPECT_EQ(Ctl({"cancel", talker}).exit_code, 0);
  std::ofstream(go) << "go\n";
  const std::string described = WaitUntilDoneOrRestarting(quiet);
  EXPECT_NE(described.find("SUCCEEDED"), std::string::npos) << described;
  EXPECT_EQ(described.find("  hang  "), std::string::npos) << described;  // no hang event
}

// Whether a child of this process may set its oom_score_adj to `value` (below the value last
// set with CAP_SYS_RESOURCE it needs that capability): what the agents it starts may do.
bool CanSetOomScoreAdj(const char* value) {
  const pid_t child = fork();
  if (child == 0) {
    const int fd = open("/proc/self/oom_score_adj", O_WRONLY);
    const ssize_t length = static_cast<ssize_t>(strlen(value));
    _exit(fd >= 0 && write(fd, value, length) == length ? 0 : 1);
  }
  int status = 0;
  return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

TEST_F(AgentClusterTest, AgentsShieldThemselvesFromTheOomKillerButNotTheirWorkers) {
  // The agents run with the default --oom_score_adj=-900, which needs CAP_SYS_RESOURCE; their
  // workers keep the value the agents started with, this test's.
  const absl::StatusOr<int> own = agent::ReadOomScoreAdj();
  ASSERT_TRUE(own.ok()) << own.status();
  const bool can_lower = CanSetOomScoreAdj("-900");
  const std::string id = Submit(JobFile("long", "\"--steps=100000\", \"--step_seconds=0.05\"", 0));
  pid_t worker = 0;
  ASSERT_TRUE(WaitFor([&] { return (worker = WorkerPid(id, 1, 0)) > 0; }, absl::Seconds(30)));
  EXPECT_EQ(agent::ReadOomScoreAdj(worker).value_or(-2000), *own);
  for (const Subprocess& a : agents_) {
    if (*own <= -900) {
      // Started at or below it: kept, never raised.
      EXPECT_EQ(agent::ReadOomScoreAdj(a.pid()).value_or(-2000), *own) << a.Log();
    } else if (can_lower) {
      EXPECT_EQ(agent::ReadOomScoreAdj(a.pid()).value_or(-2000), -900) << a.Log();
    } else {
      // Without the privilege the agent says so and runs on.
      EXPECT_EQ(agent::ReadOomScoreAdj(a.pid()).value_or(-2000), *own) << a.Log();
      EXPECT_THAT(a.Log(), HasSubstr("--oom_score_adj=-900 not applied"));
    }
  }
  EXPECT_EQ(Ctl({"cancel", id}).exit_code, 0);
}

// The same without the privilege: the agents start at 300 (this test raises its own value, which
// needs none, before starting them) and lower themselves to 100, which is allowed down to the
// value last set with the privilege (0 on a fresh system); the workers get 300 back.
class AgentOomScoreTest : public AgentClusterTest {
 protected:
  void SetUp() override {
    absl::StatusOr<int> own = agent::ReadOomScoreAdj();
    ASSERT_TRUE(own.ok()) << own.status();
    original_ = *own;
    if (!agent::SetOomScoreAdj(300).ok() || !CanSetOomScoreAdj("100")) {
      (void)agent::SetOomScoreAdj(original_);
      GTEST_SKIP() << "this process cannot go to 300 and its children to 100 (it is at "
                   << original_ << ")";
    }
    AgentClusterTest::SetUp();
  }
  void TearDown() override {
    AgentClusterTest::TearDown();
    // Back down from 300: allowed, since it was set (or was above it) without the privilege.
    (void)agent::SetOomScoreAdj(original_);
  }
  int original_ = 0;
  std::vector<std::string> ExtraAgentFlags() const override { return {"--oom_score_adj=100"}; }
};

TEST_F(AgentOomScoreTest, AgentsLowerTheirOwnValueAndGiveTheirWorkersTheOneTheyStartedWith) {
  const std::string id = Submit(JobFile("long", "\"--steps=100000\", \"--step_seconds=0.05\"", 0));
  for (int rank = 0; rank < 4; ++rank) {
    pid_t worker = 0;
    ASSERT_TRUE(WaitFor([&] { return (worker = WorkerPid(id, 1, rank)) > 0; }, absl::Seconds(30)));
    EXPECT_EQ(agent::ReadOomScoreAdj(worker).value_or(-2000), 300) << "rank " << rank;
  }
  for (const Subprocess& a : agents_) {
    EXPECT_EQ(agent::ReadOomScoreAdj(a.pid()).value_or(-2000), 100) << a.Log();
    EXPECT_THAT(a.Log(), HasSubstr("oom_score_adj 100 (workers: 300)"));
  }
  EXPECT_EQ(Ctl({"cancel", id}).exit_code, 0);
}

// The kernel's OOM killer ends a worker: its exit says it was likely out of memory, not only
// "killed by signal 9". The agents (so the workers they launch) are moved into a memory cgroup
// limited to 256 MiB; skipped where this process cannot make one. The agent samples the counts
// as it launches, so the kill is counted in the cgroup it was moved to.
TEST_F(AgentClusterTest, AWorkerTheOomKillerEndsWasLikelyOutOfMemory) {
  auto cgroup = agent::MemoryCgroup::Make("ringmaster-agents", 256 << 20);
  if (!cgroup.ok()) GTEST_SKIP() << cgroup.status();
  for (const Subprocess& agent : agents_) ASSERT_TRUE((*cgroup)->Join(agent.pid()).ok());
  const std::string path = dir_ + "/oom.yaml";
  std::ofstream(path) << "name: oom\nnodes: 1\ndevices_per_node: 1\n"
                      << "trainer:\n  command: [\"" << worker_
                      << "\", \"--steps=1\", \"--eat_memory_mb=4096\"]\n  steps: 1\n"
                      << "restart: {max_restarts: 0}\n";
  CommandResult run = Ctl({"submit", "-f", path, "--wait"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(std::regex_search(
      run.output, std::regex("rank 0 on agent-\\d was killed by signal 9: likely out of memory "
                             "\\(the kernel's OOM killer killed 1 process in the workers' "
                             "memory cgroup in the \\d+\\.\\d s before\\): last output: "
                             "test_worker: eating 4096 MiB")))
      << run.output;
  // Counted on the agent that ran it.
  std::smatch node;
  ASSERT_TRUE(std::regex_search(run.output, node, std::regex("rank 0 on agent-(\\d)")));
  const int port = MetricsPort(agents_[node[1].str() == "0" ? 0 : 1]);
  auto page = HttpGet("127.0.0.1", port, "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_THAT(page->body, HasSubstr("\nringmaster_agent_worker_oom_kills_total 1\n"));
  page = HttpGet("127.0.0.1", MetricsPort(agents_[node[1].str() == "0" ? 1 : 0]), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_THAT(page->body, HasSubstr("\nringmaster_agent_worker_oom_kills_total 0\n"));
}

// Skipped where Debian's python3-torch is not installed (tools/setup does not install it: it is
// a comparison peer, not a dependency).
TEST_F(AgentClusterTest, UnmodifiedTorchDistributedProgramRunsAsACommandJob) {
  auto probe = RunCommand({"/usr/bin/python3", "-c", "import torch.distributed"}, "");
  if (!probe.ok() || probe->exit_code != 0) GTEST_SKIP() << "python3-torch is not installed";
  std::string script = std::filesystem::absolute("tests/testdata/ddp_env.py").string();
  std::string path = dir_ + "/torch.yaml";
  std::ofstream(path) << "name: torch-env\nnodes: 2\ndevices_per_node: 2\n"
                      << "trainer:\n  command: [\"/usr/bin/python3\", \"" << script << "\"]\n"
                      << "  steps: 1\n";
  CommandResult run = Ctl({"submit", "-f", path, "--wait", "--timeout=120"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.output, m, std::regex("job (\\S+) submitted")));
  for (int rank = 0; rank < 4; ++rank) {
    CommandResult logs = Ctl({"logs", m[1].str(), absl::StrCat("--rank=", rank)});
    EXPECT_NE(logs.output.find(absl::StrCat("rank ", rank, "/4")), std::string::npos)
        << logs.output;
    EXPECT_NE(logs.output.find("all_reduce 10.0 expected 10.0"), std::string::npos) << logs.output;
  }
}

}  // namespace
}  // namespace ringmaster::testing
