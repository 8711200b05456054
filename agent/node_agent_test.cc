// The agent's ordering of the coordinator's commands and the environment its workers get, with
// a fake launcher (no process), a fake clock and no coordinator: commands go to OnCommand as the
// link would hand them, and what the agent did is read from the launcher's record and from
// MakeRegister (what a reconnecting agent tells the coordinator).
#include "agent/node_agent.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/metrics/registry.h"
#include "common/status.h"
#include "common/testing/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::IsSupersetOf;
using ::testing::Not;
using ::testing::StartsWith;

constexpr absl::Duration kWait = absl::Seconds(20);

// The workers of a fake launcher, kept by the test so that they outlive the launcher (which the
// agent destroys in Shutdown). Records launches and stops as events ("launch a/1 rank 0",
// "stop a/1 rank 0" when a stop begins, "stopped a/1 rank 0" when it ends). Stops may be held
// until released, to observe what the agent does while one runs.
class FakeWorkers {
 public:
  // The agent's exit callback, from its launcher's making until the launcher is destroyed.
  void Attach(WorkerLauncher::ExitCallback on_exit) {
    absl::MutexLock lock(&mu_);
    on_exit_ = std::move(on_exit);
  }

  absl::StatusOr<pid_t> Launch(const LaunchSpec& spec) {
    absl::MutexLock lock(&mu_);
    const pid_t pid = next_pid_++;
    specs_[pid] = spec;
    running_.insert(pid);
    events_.push_back("launch " + NameLocked(pid));
    return pid;
  }

  absl::Status Stop(pid_t pid) {
    {
      absl::MutexLock lock(&mu_);
      if (!running_.count(pid)) return absl::NotFoundError("no such worker");
      events_.push_back("stop " + NameLocked(pid));
      auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !hold_stops_; };
      mu_.Await(absl::Condition(&released));
    }
    EndWorker(pid, ExitInfo{-1, SIGTERM, "", /*stopped=*/true});
    absl::MutexLock lock(&mu_);
    events_.push_back("stopped " + NameLocked(pid));
    return absl::OkStatus();
  }

  std::vector<pid_t> Running() const {
    absl::MutexLock lock(&mu_);
    return std::vector<pid_t>(running_.begin(), running_.end());
  }

  // A worker ending (by itself, or stopped): the agent hears of it as from a real launcher.
  void EndWorker(pid_t pid, ExitInfo info) {
    WorkerLauncher::ExitCallback on_exit;
    {
      absl::MutexLock lock(&mu_);
      running_.erase(pid);
      on_exit = on_exit_;
    }
    if (on_exit) on_exit(pid, info);
  }

  void HoldStops(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_stops_ = hold;
  }

  // Standbys: "standby P" when one starts, "activate P as a/2 rank 1" when it takes a rank (then
  // it is a worker, named by its assignment), "stop standby P" when it is stopped.
  absl::StatusOr<pid_t> StartStandby(const LaunchSpec& spec) {
    absl::MutexLock lock(&mu_);
    const pid_t pid = next_pid_++;
    standbys_[pid] = spec;
    events_.push_back(absl::StrCat("standby ", pid));
    return pid;
  }
  absl::Status ActivateStandby(pid_t pid, const LaunchSpec& spec) {
    absl::MutexLock lock(&mu_);
    if (!standbys_.count(pid)) return absl::NotFoundError("no such standby");
    standbys_.erase(pid);
    specs_[pid] = spec;
    running_.insert(pid);
    events_.push_back(absl::StrCat("activate ", pid, " as ", NameLocked(pid)));
    return absl::OkStatus();
  }
  absl::Status StopStandby(pid_t pid) {
    absl::MutexLock lock(&mu_);
    if (!standbys_.count(pid)) return absl::NotFoundError("no such standby");
    standbys_.erase(pid);
    events_.push_back(absl::StrCat("stop standby ", pid));
    return absl::OkStatus();
  }
  std::vector<pid_t> Standbys() const {
    absl::MutexLock lock(&mu_);
    std::vector<pid_t> pids;
    for (const auto& [pid, spec] : standbys_) pids.push_back(pid);
    return pids;
  }
  // A standby ending by itself (never reported to the agent).
  void EndStandby(pid_t pid) {
    absl::MutexLock lock(&mu_);
    standbys_.erase(pid);
  }
  LaunchSpec StandbySpec(pid_t pid) const {
    absl::MutexLock lock(&mu_);
    auto it = standbys_.find(pid);
    return it == standbys_.end() ? LaunchSpec{} : it->second;
  }

  // Waits until `event` happened; false after kWait.
  bool Await(const std::string& event) {
    absl::MutexLock lock(&mu_);
    auto happened = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return std::find(events_.begin(), events_.end(), event) != events_.end();
    };
    return mu_.AwaitWithTimeout(absl::Condition(&happened), kWait);
  }

  std::vector<std::string> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }

  // The spec of the worker launched as `name` ("a/1 rank 0").
  LaunchSpec SpecOf(const std::string& name) const {
    absl::MutexLock lock(&mu_);
    for (const auto& [pid, spec] : specs_) {
      if (NameLocked(pid) == name) return spec;
    }
    ADD_FAILURE() << "no worker " << name;
    return {};
  }

  pid_t PidOf(const std::string& name) const {
    absl::MutexLock lock(&mu_);
    for (const auto& [pid, spec] : specs_) {
      if (NameLocked(pid) == name) return pid;
    }
    ADD_FAILURE() << "no worker " << name;
    return 0;
  }

 private:
  std::string NameLocked(pid_t pid) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::map<std::string, std::string>& env = specs_.at(pid).env;
    return absl::StrCat(env.at("RINGMASTER_JOB"), "/", env.at("RINGMASTER_GENERATION"), " rank ",
                        env.at("RANK"));
  }

  mutable absl::Mutex mu_;
  WorkerLauncher::ExitCallback on_exit_ ABSL_GUARDED_BY(mu_);
  pid_t next_pid_ ABSL_GUARDED_BY(mu_) = 1000;
  std::map<pid_t, LaunchSpec> specs_ ABSL_GUARDED_BY(mu_);
  std::set<pid_t> running_ ABSL_GUARDED_BY(mu_);
  std::map<pid_t, LaunchSpec> standbys_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  bool hold_stops_ ABSL_GUARDED_BY(mu_) = false;
};

// The launcher the agent owns: no process, the workers in a FakeWorkers.
class FakeLauncher : public WorkerLauncher {
 public:
  FakeLauncher(FakeWorkers* workers, ExitCallback on_exit) : workers_(workers) {
    workers_->Attach(std::move(on_exit));
  }
  ~FakeLauncher() override { workers_->Attach(nullptr); }

  absl::StatusOr<pid_t> Launch(const LaunchSpec& spec) override { return workers_->Launch(spec); }
  absl::Status Stop(pid_t pid, absl::Duration, absl::Duration) override {
    return workers_->Stop(pid);
  }
  std::vector<pid_t> Running() const override { return workers_->Running(); }
  absl::StatusOr<pid_t> StartStandby(const LaunchSpec& spec) override {
    return workers_->StartStandby(spec);
  }
  absl::Status ActivateStandby(pid_t pid, const LaunchSpec& spec) override {
    return workers_->ActivateStandby(pid, spec);
  }
  absl::Status StopStandby(pid_t pid) override { return workers_->StopStandby(pid); }
  std::vector<pid_t> Standbys() const override { return workers_->Standbys(); }

 private:
  FakeWorkers* const workers_;
};

// A LaunchWorkers of (job, generation): one rank per device in `devices`, ranks from 0.
v1::CoordinatorMessage Launch(const std::string& job, int64_t generation,
                              std::initializer_list<int> devices) {
  v1::CoordinatorMessage m;
  v1::LaunchWorkers* launch = m.mutable_launch();
  launch->mutable_job()->set_job_id(job);
  launch->mutable_job()->set_generation(generation);
  launch->mutable_spec()->mutable_trainer()->set_builtin("gpt");
  launch->set_world_size(static_cast<int>(devices.size()));
  launch->set_master_addr("10.0.0.1");
  launch->set_master_port(29500);
  int rank = 0;
  for (int d : devices) {
    v1::RankAssignment* a = launch->add_assignments();
    a->set_rank(rank);
    a->set_local_rank(rank++);
    a->set_local_device(d);
  }
  return m;
}

// A PrepareWorkers of the builtin job `job` for `count` ranks (0: drop).
v1::CoordinatorMessage Prepare(const std::string& job, int count) {
  v1::CoordinatorMessage m;
  v1::PrepareWorkers* p = m.mutable_prepare();
  p->set_job_id(job);
  p->mutable_spec()->mutable_trainer()->set_builtin("gpt");
  (*p->mutable_spec()->mutable_trainer()->mutable_env())["OPENBLAS_NUM_THREADS"] = "1";
  p->set_count(count);
  for (int i = 0; i < count; ++i) p->add_devices(i);
  return m;
}

v1::CoordinatorMessage Stop(const std::string& job, int64_t generation) {
  v1::CoordinatorMessage m;
  m.mutable_stop()->mutable_job()->set_job_id(job);
  m.mutable_stop()->mutable_job()->set_generation(generation);
  m.mutable_stop()->set_grace_seconds(1);
  return m;
}

// Index of `event` in `events`, or -1.
int IndexOf(const std::vector<std::string>& events, const std::string& event) {
  auto it = std::find(events.begin(), events.end(), event);
  return it == events.end() ? -1 : static_cast<int>(it - events.begin());
}

class NodeAgentTest : public ::testing::Test {
 protected:
  NodeAgentTest() { MakeAgent(/*prestart_spares=*/true); }

  void MakeAgent(bool prestart_spares) {
    agent_.reset();
    work_dir_ = ringmaster::testing::FreshTestCaseDir();
    NodeAgentOptions options;
    options.node_name = "node-a";
    options.host_address = "10.0.0.2";
    options.socket_path = work_dir_ + "/worker.sock";
    options.work_dir = work_dir_;
    options.trainer_binary = "/opt/ringmaster/trainer";
    options.system_root = work_dir_ + "/no-system";  // no OOM kill counts
    options.worker_oom_score_adj = 500;
    options.prestart_spares = prestart_spares;
    for (int i = 0; i < 4; ++i) {
      v1::Device& d = options.devices.emplace_back();
      d.set_index(i);
      d.set_kind("cpu");
    }
    agent_ = std::make_unique<NodeAgent>(
        options, &metrics_, &watchdog_, &clock_,
        [this](WorkerLauncher::ExitCallback on_exit) -> std::unique_ptr<WorkerLauncher> {
          return std::make_unique<FakeLauncher>(&workers_, std::move(on_exit));
        });
  }

  ~NodeAgentTest() override {
    workers_.HoldStops(false);
    agent_.reset();
  }

  // Waits until the agent's Register satisfies `done`; false after kWait.
  bool AwaitRegister(const std::function<bool(const v1::Register&)>& done) {
    const absl::Time deadline = absl::Now() + kWait;
    while (!done(agent_->MakeRegister())) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  }

  // The Register's workers as "a/1 rank 0 PHASE pid" (pid: "pid" or "no pid").
  std::set<std::string> RunningInRegister() {
    std::set<std::string> out;
    const v1::Register r = agent_->MakeRegister();
    for (const v1::WorkerState& w : r.running_workers()) {
      out.insert(absl::StrCat(w.job().job_id(), "/", w.job().generation(), " rank ", w.rank(), " ",
                              v1::WorkerPhase_Name(w.phase()), w.pid() > 0 ? " pid" : " no pid"));
    }
    return out;
  }

  std::string work_dir_;
  FakeClock clock_;
  metrics::Registry registry_;
  RankMetrics metrics_{&registry_, &clock_, absl::Seconds(1)};
  LocalWatchdog watchdog_{&clock_, WatchdogOptions()};
  FakeWorkers workers_;  // outlives agent_ and its launcher
  std::unique_ptr<NodeAgent> agent_;
};

TEST_F(NodeAgentTest, WorkersGetTheirRanksEnvironment) {
  agent_->OnCommand(Launch("a", 1, {2, 3}));
  ASSERT_TRUE(workers_.Await("launch a/1 rank 1"));
  const LaunchSpec spec = workers_.SpecOf("a/1 rank 1");
  EXPECT_EQ(spec.argv, std::vector<std::string>{"/opt/ringmaster/trainer"});
  EXPECT_EQ(spec.oom_score_adj, 500);
  EXPECT_EQ(spec.log_path, work_dir_ + "/logs/a/1/rank-1.log");
  EXPECT_TRUE(std::filesystem::is_directory(work_dir_ + "/logs/a/1"));
  std::map<std::string, std::string> env = spec.env;
  EXPECT_EQ(env["RANK"], "1");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["WORLD_SIZE"], "2");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "29500");
  EXPECT_EQ(env["RINGMASTER_JOB"], "a");
  EXPECT_EQ(env["RINGMASTER_GENERATION"], "1");
  EXPECT_EQ(env["RINGMASTER_NODE"], "node-a");
  EXPECT_EQ(env["RINGMASTER_HOST_ADDRESS"], "10.0.0.2");
  EXPECT_EQ(env["RINGMASTER_AGENT_SOCKET"], work_dir_ + "/worker.sock");
  EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);  // CPU devices
  if (const char* path = std::getenv("PATH")) {
    EXPECT_EQ(env["PATH"], path);
  }
  // A token per worker, which the worker API checks.
  const std::string token = env["RINGMASTER_WORKER_TOKEN"];
  EXPECT_GE(token.size(), 16u);
  EXPECT_NE(token, workers_.SpecOf("a/1 rank 0").env.at("RINGMASTER_WORKER_TOKEN"));
  EXPECT_TRUE(agent_->CheckWorker("a", 1, 1, token).ok());
  EXPECT_EQ(agent_->CheckWorker("a", 1, 1, "forged").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(agent_->CheckWorker("a", 0, 1, token).message(), HasSubstr("stale generation 0"));
  EXPECT_TRUE(agent_->HoldsTokenOf("a", token));
  EXPECT_FALSE(agent_->HoldsTokenOf("b", token));
  EXPECT_EQ(agent_->RunningWorkers(), 2);
}

TEST_F(NodeAgentTest, LaunchIsIdempotentPerGenerationAndStaleOnesAreIgnored) {
  agent_->OnCommand(Launch("a", 2, {0}));
  agent_->OnCommand(Launch("a", 2, {0}));  // a repeat
  agent_->OnCommand(Launch("a", 1, {0}));  // stale
  agent_->OnCommand(Launch("z", 1, {3}));  // carried out after the three above
  ASSERT_TRUE(workers_.Await("launch z/1 rank 0"));
  EXPECT_EQ(workers_.events(),
            (std::vector<std::string>{"launch a/2 rank 0", "launch z/1 rank 0"}));
  EXPECT_THAT(agent_->CheckWorker("a", 1, 0, "").message(), HasSubstr("stale generation 1"));
}

TEST_F(NodeAgentTest, ANewGenerationStopsTheOlderOneFirst) {
  agent_->OnCommand(Launch("a", 1, {0}));
  agent_->OnCommand(Launch("a", 2, {0}));  // no StopWorkers came between
  ASSERT_TRUE(workers_.Await("launch a/2 rank 0"));
  EXPECT_EQ(workers_.events(),
            (std::vector<std::string>{"launch a/1 rank 0", "stop a/1 rank 0", "stopped a/1 rank 0",
                                      "launch a/2 rank 0"}));
}

TEST_F(NodeAgentTest, AJobsLaunchWaitsForItsStopWhileOtherJobsGoOn) {
  agent_->OnCommand(Launch("a", 1, {0}));
  ASSERT_TRUE(workers_.Await("launch a/1 rank 0"));
  workers_.HoldStops(true);
  agent_->OnCommand(Stop("a", 1));
  ASSERT_TRUE(workers_.Await("stop a/1 rank 0"));
  agent_->OnCommand(Launch("a", 2, {1}));  // another device: waits for the job's stop
  agent_->OnCommand(Launch("b", 1, {2}));
  ASSERT_TRUE(workers_.Await("launch b/1 rank 0"));
  EXPECT_EQ(IndexOf(workers_.events(), "launch a/2 rank 0"), -1);
  // Meanwhile Register lists the queued launch as starting, the one being stopped as running.
  EXPECT_THAT(RunningInRegister(), IsSupersetOf({"a/1 rank 0 WORKER_PHASE_STEP pid",
                                                 "a/2 rank 0 WORKER_PHASE_STARTING no pid",
                                                 "b/1 rank 0 WORKER_PHASE_STEP pid"}));
  workers_.HoldStops(false);
  ASSERT_TRUE(workers_.Await("launch a/2 rank 0"));
  const std::vector<std::string> events = workers_.events();
  EXPECT_LT(IndexOf(events, "stopped a/1 rank 0"), IndexOf(events, "launch a/2 rank 0"));
}

TEST_F(NodeAgentTest, ALaunchWaitsForItsDeviceToBeFreedByAnotherJobsStop) {
  agent_->OnCommand(Launch("a", 1, {0}));
  ASSERT_TRUE(workers_.Await("launch a/1 rank 0"));
  workers_.HoldStops(true);
  agent_->OnCommand(Stop("a", 1));
  ASSERT_TRUE(workers_.Await("stop a/1 rank 0"));
  agent_->OnCommand(Launch("b", 1, {0}));  // a's worker still holds device 0
  agent_->OnCommand(Launch("c", 1, {1}));
  ASSERT_TRUE(workers_.Await("launch c/1 rank 0"));
  EXPECT_EQ(IndexOf(workers_.events(), "launch b/1 rank 0"), -1);
  workers_.HoldStops(false);
  ASSERT_TRUE(workers_.Await("launch b/1 rank 0"));
  const std::vector<std::string> events = workers_.events();
  EXPECT_LT(IndexOf(events, "stopped a/1 rank 0"), IndexOf(events, "launch b/1 rank 0"));
}

TEST_F(NodeAgentTest, AStoppedWorkersExitIsReportedAtTheClocksTime) {
  agent_->OnCommand(Launch("a", 1, {0}));
  ASSERT_TRUE(workers_.Await("launch a/1 rank 0"));
  clock_.Advance(absl::Minutes(3));
  agent_->OnCommand(Stop("a", 1));
  ASSERT_TRUE(workers_.Await("stopped a/1 rank 0"));
  ASSERT_TRUE(AwaitRegister([](const v1::Register& r) { return r.exited_workers_size() == 1; }));
  const v1::WorkerState exit = agent_->MakeRegister().exited_workers(0);
  EXPECT_EQ(exit.job().job_id(), "a");
  EXPECT_EQ(exit.signal(), SIGTERM);
  EXPECT_EQ(exit.phase(), v1::WORKER_PHASE_EXITED);
  EXPECT_EQ(exit.time_unix_nanos(), absl::ToUnixNanos(clock_.Now()));
  EXPECT_EQ(agent_->RunningWorkers(), 0);
  EXPECT_THAT(agent_->CheckWorker("a", 1, 0, "").message(), HasSubstr("no worker of job a"));
}

// A fatal exit announced (the watch ending a launcher under a shell that goes on) stands though
// the process exits 0; another announced code does not change the exit.
TEST_F(NodeAgentTest, AnAnnouncedFatalExitStandsThoughTheProcessExitsZero) {
  agent_->OnCommand(Launch("a", 1, {0, 1}));
  ASSERT_TRUE(workers_.Await("launch a/1 rank 1"));
  agent_->NoteExitAnnounced("a", 1, 0, kExitFatal, "torchrun started inside rank 0's command");
  agent_->NoteExitAnnounced("a", 1, 1, 1, "ValueError: helper");
  workers_.EndWorker(workers_.PidOf("a/1 rank 0"), ExitInfo{0, 0, "went on", false});
  workers_.EndWorker(workers_.PidOf("a/1 rank 1"), ExitInfo{0, 0, "went on", false});
  const v1::Register r = agent_->MakeRegister();
  ASSERT_EQ(r.exited_workers_size(), 2);
  for (const v1::WorkerState& exit : r.exited_workers()) {
    if (exit.rank() == 0) {
      EXPECT_EQ(exit.exit_code(), kExitFatal);
      EXPECT_EQ(exit.exit_reason(), "torchrun started inside rank 0's command");
    } else {
      EXPECT_EQ(exit.exit_code(), 0);
      EXPECT_EQ(exit.exit_reason(), "");
    }
  }
}

TEST_F(NodeAgentTest, AWorkersOwnExitIsReported) {
  agent_->OnCommand(Launch("a", 1, {0}));
  ASSERT_TRUE(workers_.Await("launch a/1 rank 0"));
  workers_.EndWorker(workers_.PidOf("a/1 rank 0"), ExitInfo{3, 0, "loss is NaN", false});
  const v1::Register r = agent_->MakeRegister();  // OnExit ran on this thread
  ASSERT_EQ(r.exited_workers_size(), 1);
  EXPECT_EQ(r.exited_workers(0).exit_code(), 3);
  EXPECT_EQ(r.exited_workers(0).exit_reason(), "last output: loss is NaN");
  // Listed as starting no longer once its launch, which the exit may overtake, has returned.
  EXPECT_TRUE(AwaitRegister([](const v1::Register& r) { return r.running_workers_size() == 0; }));
  EXPECT_EQ(agent_->RunningWorkers(), 0);
}

TEST_F(NodeAgentTest, ALaunchTheAgentCannotRunSafelyFailsItsRanksOnly) {
  agent_->OnCommand(Launch("../etc", 1, {0, 1}));
  agent_->OnCommand(Launch("z", 1, {3}));
  ASSERT_TRUE(workers_.Await("launch z/1 rank 0"));
  EXPECT_EQ(workers_.events(), std::vector<std::string>{"launch z/1 rank 0"});
  const v1::Register r = agent_->MakeRegister();
  ASSERT_EQ(r.exited_workers_size(), 2);
  for (const v1::WorkerState& exit : r.exited_workers()) {
    EXPECT_EQ(exit.job().job_id(), "../etc");
    EXPECT_EQ(exit.exit_code(), kExitFatal);
    EXPECT_THAT(exit.exit_reason(), StartsWith("cannot launch: job.job_id: "));
    EXPECT_EQ(exit.time_unix_nanos(), absl::ToUnixNanos(clock_.Now()));
  }
  EXPECT_FALSE(std::filesystem::exists(work_dir_ + "/etc"));
}

TEST_F(NodeAgentTest, ALeavingNodeLaunchesNothing) {
  agent_->Leave(absl::ZeroDuration(), absl::Seconds(1), "test");
  agent_->OnCommand(Launch("a", 1, {0}));
  ASSERT_TRUE(AwaitRegister([](const v1::Register& r) { return r.exited_workers_size() == 1; }));
  const v1::WorkerState exit = agent_->MakeRegister().exited_workers(0);
  EXPECT_EQ(exit.exit_code(), kExitRetryable);
  EXPECT_EQ(exit.exit_reason(), "not launched: the node is leaving");
  EXPECT_TRUE(workers_.events().empty());
}

// A coordinator forgets a node's Leaving with its stream: a leaving agent that registers anew
// (its stream broke, or the coordinator was replaced) says so in its registration.
TEST_F(NodeAgentTest, ALeavingAgentSaysSoInEachRegistration) {
  EXPECT_FALSE(agent_->MakeRegister().has_leaving());
  agent_->Leave(absl::Seconds(60), absl::Seconds(1), "upgrade");
  const v1::Register again = agent_->MakeRegister();
  ASSERT_TRUE(again.has_leaving());
  EXPECT_EQ(again.leaving().reason(), "upgrade");
  EXPECT_EQ(again.leaving().checkpoint_grace_seconds(), 60);
  EXPECT_TRUE(agent_->Registered().empty());  // nothing more to write after the ack
}

TEST_F(NodeAgentTest, ALinkCheckIsRequestedThroughARunningWorkerOnce) {
  agent_->OnCommand(Launch("a", 1, {0}));
  ASSERT_TRUE(workers_.Await("launch a/1 rank 0"));
  v1::CoordinatorMessage check;
  check.mutable_check_links()->mutable_job()->set_job_id("a");
  check.mutable_check_links()->mutable_job()->set_generation(1);
  check.mutable_check_links()->set_rank(0);
  agent_->OnCommand(check);
  EXPECT_TRUE(agent_->TakeLinkCheckRequest("a", 1, 0));
  EXPECT_FALSE(agent_->TakeLinkCheckRequest("a", 1, 0));
  check.mutable_check_links()->set_rank(5);  // no such worker here
  agent_->OnCommand(check);
  EXPECT_FALSE(agent_->TakeLinkCheckRequest("a", 1, 5));
}

TEST_F(NodeAgentTest, ShutdownStopsEveryWorker) {
  agent_->OnCommand(Launch("a", 1, {0, 1}));
  ASSERT_TRUE(workers_.Await("launch a/1 rank 1"));
  agent_->Shutdown(absl::Seconds(1));
  EXPECT_THAT(workers_.events(), IsSupersetOf({"stopped a/1 rank 0", "stopped a/1 rank 1"}));
}


// Hot spares: a PrepareWorkers pre-starts standbys; the launch that follows hands them the ranks.
TEST_F(NodeAgentTest, ALaunchOnASpareUsesItsPreStartedStandbys) {
  agent_->OnCommand(Prepare("a", 2));
  ASSERT_TRUE(workers_.Await("standby 1001"));
  const LaunchSpec standby = workers_.StandbySpec(1000);
  EXPECT_EQ(standby.argv,
            (std::vector<std::string>{"/opt/ringmaster/trainer", "--standby_fd=3"}));
  EXPECT_EQ(standby.oom_score_adj, 500);
  EXPECT_EQ(standby.env.at("OPENBLAS_NUM_THREADS"), "1");  // the job's own environment
  EXPECT_EQ(standby.env.count("RANK"), 0u);                // nothing of a rank
  // Never workers: not running, not in Register.
  EXPECT_EQ(agent_->RunningWorkers(), 0);
  EXPECT_TRUE(agent_->MakeRegister().running_workers().empty());
  agent_->OnCommand(Prepare("a", 2));  // a repeat starts none
  agent_->OnCommand(Launch("a", 2, {0, 1}));
  ASSERT_TRUE(workers_.Await("activate 1001 as a/2 rank 1"));
  EXPECT_EQ(workers_.events(),
            (std::vector<std::string>{"standby 1000", "standby 1001", "activate 1000 as a/2 rank 0",
                                      "activate 1001 as a/2 rank 1"}));
  // The worker has the environment of a normal launch.
  const LaunchSpec spec = workers_.SpecOf("a/2 rank 1");
  EXPECT_EQ(spec.argv, std::vector<std::string>{"/opt/ringmaster/trainer"});
  EXPECT_EQ(spec.env.at("RANK"), "1");
  EXPECT_EQ(spec.log_path, work_dir_ + "/logs/a/2/rank-1.log");
  EXPECT_TRUE(agent_->CheckWorker("a", 2, 1, spec.env.at("RINGMASTER_WORKER_TOKEN")).ok());
  EXPECT_EQ(agent_->RunningWorkers(), 2);
}

TEST_F(NodeAgentTest, RanksWithoutALiveStandbyAreStartedAndUnusedOnesStopped) {
  agent_->OnCommand(Prepare("a", 2));
  ASSERT_TRUE(workers_.Await("standby 1001"));
  workers_.EndStandby(1000);  // died by itself: never reported
  agent_->OnCommand(Launch("a", 2, {0, 1, 2}));
  ASSERT_TRUE(workers_.Await("launch a/2 rank 2"));
  EXPECT_EQ(workers_.events(),
            (std::vector<std::string>{"standby 1000", "standby 1001", "activate 1001 as a/2 rank 0",
                                      "launch a/2 rank 1", "launch a/2 rank 2"}));
  EXPECT_EQ(agent_->RunningWorkers(), 3);
}

TEST_F(NodeAgentTest, AnotherProgramIsLaunchedNormallyAndTheStandbysStopped) {
  agent_->OnCommand(Prepare("a", 1));
  ASSERT_TRUE(workers_.Await("standby 1000"));
  v1::CoordinatorMessage launch = Launch("a", 2, {0});
  launch.mutable_launch()->mutable_spec()->mutable_trainer()->mutable_command()->add_argv(
      "/bin/true");
  agent_->OnCommand(launch);
  ASSERT_TRUE(workers_.Await("stop standby 1000"));
  EXPECT_EQ(workers_.events(), (std::vector<std::string>{"standby 1000", "launch a/2 rank 0",
                                                         "stop standby 1000"}));
}

TEST_F(NodeAgentTest, StandbysGoWhenTheSpareIsLetGoOrTheAgentStops) {
  agent_->OnCommand(Prepare("a", 1));
  agent_->OnCommand(Prepare("b", 1));
  ASSERT_TRUE(workers_.Await("standby 1001"));
  agent_->OnCommand(Prepare("a", 0));  // no spare of a any more
  ASSERT_TRUE(workers_.Await("stop standby 1000"));
  EXPECT_EQ(workers_.Standbys(), std::vector<pid_t>{1001});
  agent_->Shutdown(absl::Seconds(1));
  EXPECT_TRUE(workers_.Standbys().empty());
  EXPECT_EQ(workers_.events().back(), "stop standby 1001");
}

// A count beyond the node's devices (4 here) is refused whole: no fork storm from one message.
TEST_F(NodeAgentTest, APrepareForMoreRanksThanDevicesStartsNone) {
  agent_->OnCommand(Prepare("a", 5));
  agent_->OnCommand(Prepare("a", 1));  // carried out after the first, in order
  ASSERT_TRUE(workers_.Await("standby 1000"));
  EXPECT_EQ(workers_.events(), std::vector<std::string>{"standby 1000"});
}

TEST_F(NodeAgentTest, NothingIsPreStartedWhenOffOrForACommandJob) {
  MakeAgent(/*prestart_spares=*/false);
  agent_->OnCommand(Prepare("a", 1));
  agent_->OnCommand(Launch("a", 1, {0}));
  ASSERT_TRUE(workers_.Await("launch a/1 rank 0"));
  MakeAgent(/*prestart_spares=*/true);
  v1::CoordinatorMessage command_job = Prepare("b", 1);
  command_job.mutable_prepare()->mutable_spec()->mutable_trainer()->mutable_command()->add_argv(
      "python3");
  agent_->OnCommand(command_job);
  agent_->OnCommand(Launch("b", 1, {0}));
  ASSERT_TRUE(workers_.Await("launch b/1 rank 0"));
  for (const std::string& event : workers_.events()) {
    EXPECT_THAT(event, Not(HasSubstr("standby")));
  }
}

}  // namespace
}  // namespace ringmaster::agent
