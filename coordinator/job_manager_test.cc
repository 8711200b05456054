#include "coordinator/job_manager.h"

#include <sqlite3.h>

#include <cmath>
#include <functional>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "common/testing/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Records what would go to agents.
class RecordingSink : public AgentCommandSink {
 public:
  bool Send(const std::string& node, const v1::CoordinatorMessage& message) override {
    if (on_send) on_send(node, message);
    sent.emplace_back(node, message);
    return true;
  }
  // Called at each Send (under the job manager's lock), when set.
  std::function<void(const std::string&, const v1::CoordinatorMessage&)> on_send;
  std::vector<v1::LaunchWorkers> Launches() const {
    std::vector<v1::LaunchWorkers> out;
    for (const auto& [node, m] : sent) {
      if (m.has_launch()) out.push_back(m.launch());
    }
    return out;
  }
  std::vector<std::pair<std::string, v1::StopWorkers>> Stops() const {
    std::vector<std::pair<std::string, v1::StopWorkers>> out;
    for (const auto& [node, m] : sent) {
      if (m.has_stop()) out.emplace_back(node, m.stop());
    }
    return out;
  }
  std::vector<std::pair<std::string, v1::CoordinatorMessage>> sent;
};

v1::JobSpec Spec(int nodes = 1, int devices_per_node = 2) {
  v1::JobSpec spec;
  spec.set_name("gpt-test");
  spec.set_nodes(nodes);
  spec.set_devices_per_node(devices_per_node);
  spec.mutable_parallelism()->set_tensor(1);
  spec.mutable_parallelism()->set_pipeline(1);
  spec.mutable_parallelism()->set_data(nodes * devices_per_node);
  v1::TrainerSpec* t = spec.mutable_trainer();
  t->set_builtin("gpt");
  t->mutable_model()->set_layers(2);
  t->mutable_model()->set_d_model(32);
  t->mutable_model()->set_heads(2);
  t->mutable_model()->set_seq_len(16);
  t->mutable_model()->set_vocab(128);
  t->mutable_batch()->set_micro_batch(2);
  t->mutable_batch()->set_global_batch(2 * nodes * devices_per_node);
  t->set_steps(10);
  t->mutable_optimizer()->set_lr(1e-3);
  spec.mutable_restart()->set_max_restarts(1);
  return spec;
}

v1::Register Node(const std::string& name, int devices) {
  v1::Register r;
  r.set_node(name);
  r.set_host_address(name + ".local");
  for (int i = 0; i < devices; ++i) {
    v1::Device* d = r.add_devices();
    d->set_index(i);
    d->set_kind("cpu");
  }
  return r;
}

v1::JobGeneration Generation(const v1::JobStatus& job) {
  v1::JobGeneration g;
  g.set_job_id(job.job_id());
  g.set_generation(job.generation());
  return g;
}

v1::WorkerState Exit(const v1::JobStatus& job, int rank, int code, int signal = 0) {
  v1::WorkerState s;
  s.mutable_job()->set_job_id(job.job_id());
  s.mutable_job()->set_generation(job.generation());
  s.set_rank(rank);
  s.set_phase(v1::WORKER_PHASE_EXITED);
  s.set_exit_code(code);
  s.set_signal(signal);
  return s;
}

// `name`'s registration after a coordinator restart: ranks `running` of `job`'s generation still
// run there, and its agent lists `exits`, the exits it reported.
v1::Register Returning(const std::string& name, int devices, const v1::JobStatus& job,
                       const std::vector<int>& running,
                       const std::vector<v1::WorkerState>& exits = {}) {
  v1::Register r = Node(name, devices);
  for (int rank : running) {
    v1::WorkerState* w = r.add_running_workers();
    w->mutable_job()->set_job_id(job.job_id());
    w->mutable_job()->set_generation(job.generation());
    w->set_rank(rank);
  }
  for (const v1::WorkerState& e : exits) *r.add_exited_workers() = e;
  return r;
}

// The agent watchdog's report that `rank` has been silent in its STEP phase for `age` seconds.
v1::WorkerState HangReport(const v1::JobStatus& job, int rank, double age) {
  v1::WorkerState s = Exit(job, rank, 0);
  s.set_phase(v1::WORKER_PHASE_STEP);
  s.set_last_report_age_seconds(age);
  return s;
}

// A summary of `rank` at `step` with dp0 sequence numbers and `compute` seconds per step.
v1::StepSummary Summary(const v1::JobStatus& job, int rank, int64_t step, int64_t entered,
                        int64_t completed, double compute = 0.1) {
  v1::StepSummary s;
  s.mutable_job()->set_job_id(job.job_id());
  s.mutable_job()->set_generation(job.generation());
  s.set_rank(rank);
  s.set_step(step);
  (*s.mutable_collective_entered())["dp0"] = entered;
  (*s.mutable_collective_completed())["dp0"] = completed;
  s.set_mean_compute_seconds(compute);
  s.set_steps_in_summary(1);
  return s;
}

// The events of `kind`.
std::vector<v1::JobEvent> EventsOf(const v1::GetJobResponse& r, const std::string& kind) {
  std::vector<v1::JobEvent> out;
  for (const auto& e : r.events()) {
    if (e.kind() == kind) out.push_back(e);
  }
  return out;
}

std::vector<v1::JobState> StatesOf(const v1::GetJobResponse& r) {
  std::vector<v1::JobState> states;
  for (const auto& e : r.events()) {
    if (e.kind() == "state") states.push_back(e.state());
  }
  return states;
}

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(testing::TestTempDir(), "/jobs-",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".db");
    auto store = JobStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    MakeManager();
  }

  void MakeManager() {
    nodes_ = std::make_unique<NodeManager>(&clock_, absl::Seconds(3), absl::Hours(1), &registry_);
    rendezvous_ = std::make_unique<RendezvousManager>(&clock_, nullptr);
    JobManagerOptions options;
    options.reconcile_timeout = absl::Seconds(10);
    options.restart_backoff = restart_backoff_;  // off unless a test turns it on
    options.restart_backoff_max = absl::Seconds(4);
    options.ended_job_retention = ended_job_retention_;
    jobs_ = std::make_unique<JobManager>(store_.get(), nodes_.get(), rendezvous_.get(), &sink_,
                                         &clock_, &registry_, options);
    ASSERT_TRUE(jobs_->Recover().ok());
  }

  void AddNode(const std::string& name, int devices) {
    ASSERT_TRUE(nodes_->Register(Node(name, devices)).ok());
    jobs_->Schedule();
  }

  v1::JobStatus Current(const std::string& id) { return jobs_->Get(id)->job(); }

  // With crash-loop backoff `restart_backoff` (4 s at most): node n1 with 2 devices, and a job
  // with 10 restarts running there. Returns its id, or "" on failure.
  std::string SubmitOnOneNode(absl::Duration restart_backoff) {
    restart_backoff_ = restart_backoff;
    MakeManager();
    AddNode("n1", 2);
    v1::JobSpec spec = Spec(1, 2);
    spec.mutable_restart()->set_max_restarts(10);
    auto job = jobs_->Submit(spec, "", alice_);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->job_id() : "";
  }

  // Nodes n1 and n2 with 2 devices each and a running 4-rank data-parallel job over both.
  struct TwoNodeJob {
    std::string id;
    v1::JobStatus running;
    std::vector<std::string> node;  // by rank
  };
  TwoNodeJob RunOnTwoNodes() {
    AddNode("n1", 2);
    AddNode("n2", 2);
    auto job = jobs_->Submit(Spec(2, 2), "", alice_);
    EXPECT_TRUE(job.ok()) << job.status();
    TwoNodeJob out;
    if (!job.ok()) return out;
    out.id = job->job_id();
    out.running = Current(out.id);
    EXPECT_EQ(out.running.state(), v1::JOB_STATE_RUNNING);
    out.node.resize(out.running.assignments_size());
    for (const auto& a : out.running.assignments()) out.node[a.rank()] = a.node();
    return out;
  }

  // A node's agent connects again: registered and reconciled as the agent service does it
  // (RegisterNode). Nothing is sent to the node before its stream is acknowledged.
  void Reconnect(const v1::Register& registration) {
    const std::string& node = registration.node();
    auto sent_to_node = [&] {
      return std::count_if(sink_.sent.begin(), sink_.sent.end(),
                           [&](const auto& s) { return s.first == node; });
    };
    const auto before = sent_to_node();
    bool acknowledged = false;
    auto session = jobs_->RegisterNode(registration, [&](uint64_t) {
      acknowledged = true;
      EXPECT_EQ(sent_to_node(), before) << "a command to " << node << " before its ack";
    });
    ASSERT_TRUE(session.ok()) << session.status();
    EXPECT_TRUE(acknowledged);
    EXPECT_TRUE(nodes_->Heartbeat(node, *session).ok());  // the node's current session
  }

  // Nodes a and b with 2 devices each and a running 2-rank job on one of them (`from`), the other
  // free (`to`); what was sent to agents so far is cleared.
  struct TwoNodes {
    std::string id, from, to;
    v1::JobStatus first;
  };
  void RunOnOneOfTwoNodes() {
    AddNode("a", 2);
    AddNode("b", 2);
    auto job = jobs_->Submit(Spec(), "", alice_);
    ASSERT_TRUE(job.ok()) << job.status();
    two_.id = job->job_id();
    two_.first = Current(two_.id);
    ASSERT_EQ(two_.first.state(), v1::JOB_STATE_RUNNING);
    two_.from = two_.first.assignments(0).node();
    two_.to = two_.from == "a" ? "b" : "a";
    sink_.sent.clear();
  }
  TwoNodes two_;

  std::string path_;
  absl::Duration restart_backoff_ = absl::ZeroDuration();
  absl::Duration ended_job_retention_ = absl::ZeroDuration();  // keep ended jobs unless set
  FakeClock clock_;
  metrics::Registry registry_;
  RecordingSink sink_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<NodeManager> nodes_;
  std::unique_ptr<RendezvousManager> rendezvous_;
  std::unique_ptr<JobManager> jobs_;
  Caller alice_{"alice", false};
};

TEST_F(JobManagerTest, InvalidSpecIsRefusedNamingTheField) {
  v1::JobSpec spec = Spec();
  spec.mutable_parallelism()->set_data(3);
  auto job = jobs_->Submit(spec, "", alice_);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("parallelism"), std::string::npos) << job.status();
  EXPECT_TRUE(jobs_->List({}, 0).empty());
}

TEST_F(JobManagerTest, PendingUntilCapacityThenRunningWithLaunches) {
  auto job = jobs_->Submit(Spec(2, 2), "", alice_);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_PENDING);
  EXPECT_NE(job->reason().find("needs"), std::string::npos) << job->reason();
  AddNode("n1", 2);
  EXPECT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_PENDING);
  AddNode("n2", 2);
  v1::JobStatus running = Current(job->job_id());
  ASSERT_EQ(running.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(running.generation(), 1);
  EXPECT_EQ(running.assignments_size(), 4);
  EXPECT_EQ(running.reason(), "");
  auto launches = sink_.Launches();
  ASSERT_EQ(launches.size(), 2u);
  for (const auto& launch : launches) {
    EXPECT_EQ(launch.job().job_id(), job->job_id());
    EXPECT_EQ(launch.job().generation(), 1);
    EXPECT_EQ(launch.world_size(), 4);
    EXPECT_EQ(launch.assignments_size(), 2);
    EXPECT_EQ(launch.master_addr(), running.assignments(0).node() + ".local");
  }
  // The rendezvous store of generation 1 is open.
  EXPECT_TRUE(rendezvous_->Set(job->job_id(), 1, "k", "v").ok());
  EXPECT_NE(registry_.RenderText().find("ringmaster_jobs{state=\"running\"} 1"), std::string::npos);
}

TEST_F(JobManagerTest, RequestIdMakesSubmitIdempotent) {
  auto first = jobs_->Submit(Spec(), "req-1", alice_);
  auto second = jobs_->Submit(Spec(), "req-1", alice_);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->job_id(), second->job_id());
  EXPECT_EQ(jobs_->List({}, 0).size(), 1u);
}

TEST_F(JobManagerTest, SucceedsWhenEveryRankExitsZero) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus running = Current(job->job_id());
  jobs_->OnWorkerState("n1", Exit(running, 0, 0));
  EXPECT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_RUNNING);
  jobs_->OnWorkerState("n1", Exit(running, 1, 0));
  auto done = jobs_->Get(job->job_id());
  EXPECT_EQ(done->job().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(StatesOf(*done),
            (std::vector<v1::JobState>{v1::JOB_STATE_PENDING, v1::JOB_STATE_RUNNING,
                                       v1::JOB_STATE_SUCCEEDED}));
  EXPECT_GT(done->job().end_time_unix_nanos(), 0);
  EXPECT_EQ(nodes_->FreeCapacity()[0].free.size(), 2u);  // Devices released.
}

TEST_F(JobManagerTest, FailureRestartsWithANewGenerationThenFailsWhenRestartsRunOut) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  jobs_->OnWorkerState("n1", Exit(gen1, 1, 0, /*signal=*/9));
  v1::JobStatus gen2 = Current(job->job_id());
  EXPECT_EQ(gen2.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(gen2.generation(), 2);
  EXPECT_EQ(gen2.restarts(), 1);
  auto stops = sink_.Stops();
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].second.job().generation(), 1);
  ASSERT_EQ(sink_.Launches().size(), 2u);
  EXPECT_EQ(sink_.Launches()[1].restart_count(), 1);
  // Generation 1's rendezvous is fenced off.
  EXPECT_EQ(rendezvous_->Set(job->job_id(), 1, "k", "v").code(),
            absl::StatusCode::kFailedPrecondition);
  // A late report from generation 1 changes nothing.
  jobs_->OnWorkerState("n1", Exit(gen1, 0, 1));
  EXPECT_EQ(Current(job->job_id()).generation(), 2);

  jobs_->OnWorkerState("n1", Exit(gen2, 0, 1));
  auto failed = jobs_->Get(job->job_id());
  EXPECT_EQ(failed->job().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(StatesOf(*failed),
            (std::vector<v1::JobState>{v1::JOB_STATE_PENDING, v1::JOB_STATE_RUNNING,
                                       v1::JOB_STATE_RESTARTING, v1::JOB_STATE_RUNNING,
                                       v1::JOB_STATE_FAILED}));
  bool named_rank = false;
  for (const auto& e : failed->events()) {
    if (e.kind() == "worker_exit" && e.ranks_size() == 1 && e.ranks(0) == 1) named_rank = true;
  }
  EXPECT_TRUE(named_rank);
}

// Why a rank failed, as its agent tells it, is in the worker_exit event and in the job's failure:
// on one line and bounded, whatever the agent sent.
TEST_F(JobManagerTest, AFailedRanksReasonIsInItsEventAndInTheJobsFailure) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::WorkerState exit = Exit(Current(job->job_id()), 1, 75);
  exit.set_exit_reason("UNAVAILABLE: all_reduce on tp0: remote process exited");
  jobs_->OnWorkerState("n1", exit);
  v1::JobStatus restarted = Current(job->job_id());
  EXPECT_EQ(restarted.generation(), 2);

  exit = Exit(restarted, 0, -1, /*signal=*/6);
  exit.set_exit_reason("last output: terminate called\nafter throwing " + std::string(5000, 'x'));
  jobs_->OnWorkerState("n1", exit);
  auto failed = jobs_->Get(job->job_id());
  ASSERT_EQ(failed->job().state(), v1::JOB_STATE_FAILED);
  std::vector<std::string> messages;
  for (const auto& e : failed->events()) {
    if (e.kind() == "worker_exit") messages.push_back(e.message());
  }
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0],
            "rank 1 on n1 exited with code 75: UNAVAILABLE: all_reduce on tp0: remote process "
            "exited");
  const std::string prefix =
      "rank 0 on n1 was killed by signal 6: last output: terminate called after throwing xxx";
  EXPECT_EQ(messages[1].rfind(prefix, 0), 0u) << messages[1];
  // And the transition to FAILED says it too.
  const v1::JobEvent& last = failed->events(failed->events_size() - 1);
  EXPECT_EQ(last.message().rfind(prefix, 0), 0u) << last.message();
  EXPECT_EQ(messages[1].find('\n'), std::string::npos);
  EXPECT_LE(messages[1].size(), std::string("rank 0 on n1 was killed by signal 6: ").size() + 512);
  EXPECT_EQ(messages[1].substr(messages[1].size() - 3), "...");
}

// The per-job counters exist from submission at 0 (so increase() in an alert counts the first
// restart) and are removed with the job's other series when it ends (bounded cardinality).
TEST_F(JobManagerTest, JobCountersStartAtZeroAndAreRemovedWhenTheJobEnds) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  const std::string restarts = "ringmaster_job_restarts_total{job_id=\"" + job->job_id() + "\"} ";
  const std::string hangs = "ringmaster_job_hangs_total{job_id=\"" + job->job_id() + "\"} ";
  std::string page = registry_.RenderText();
  EXPECT_NE(page.find(restarts + "0\n"), std::string::npos) << page;
  EXPECT_NE(page.find(hangs + "0\n"), std::string::npos) << page;

  jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 1, 0, /*signal=*/9));
  page = registry_.RenderText();
  EXPECT_NE(page.find(restarts + "1\n"), std::string::npos) << page;

  jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 0, 1));  // No restarts left: FAILED.
  ASSERT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_FAILED);
  page = registry_.RenderText();
  EXPECT_EQ(page.find(restarts), std::string::npos) << page;
  EXPECT_EQ(page.find(hangs), std::string::npos) << page;
}

TEST_F(JobManagerTest, HangReportNamesTheRankAndRestarts) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  v1::WorkerState phase_change = Exit(gen1, 1, 0);
  phase_change.set_phase(v1::WORKER_PHASE_STEP);  // No silence: not a hang.
  jobs_->OnWorkerState("n1", phase_change);
  EXPECT_EQ(Current(job->job_id()).generation(), 1);

  v1::WorkerState hung = phase_change;
  hung.set_last_report_age_seconds(12.5);
  jobs_->OnWorkerState("n1", hung);
  auto after = jobs_->Get(job->job_id());
  EXPECT_EQ(after->job().generation(), 2);
  EXPECT_EQ(after->job().state(), v1::JOB_STATE_RUNNING);
  bool named = false;
  for (const auto& e : after->events()) {
    if (e.kind() == "hang" && e.ranks_size() == 1 && e.ranks(0) == 1 &&
        e.message() == "rank 1 on n1 made no progress for 12.5 s in phase step: hung") {
      named = true;
    }
  }
  EXPECT_TRUE(named);
  EXPECT_NE(
      registry_.RenderText().find("ringmaster_job_hangs_total{job_id=\"" + job->job_id() + "\"} 1"),
      std::string::npos);
}

// Ended jobs are kept for ended_job_retention after they ended, then deleted from memory and the
// store with their request ids; running jobs and recently ended ones stay.
TEST_F(JobManagerTest, EndedJobsAreDeletedOnceTheirRetentionHasPassed) {
  ended_job_retention_ = absl::Hours(2);
  MakeManager();
  AddNode("n1", 4);
  auto old_job = jobs_->Submit(Spec(), "req-old", alice_);
  auto running = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(old_job.ok() && running.ok());
  ASSERT_TRUE(jobs_->Cancel(old_job->job_id(), "", alice_).ok());
  clock_.Advance(absl::Hours(1));
  auto recent = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(recent.ok());
  ASSERT_TRUE(jobs_->Cancel(recent->job_id(), "", alice_).ok());
  jobs_->Tick();  // the old job ended an hour ago: kept
  EXPECT_TRUE(jobs_->Get(old_job->job_id()).ok());
  clock_.Advance(absl::Hours(1) + absl::Seconds(1));
  jobs_->Tick();
  EXPECT_EQ(jobs_->Get(old_job->job_id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(jobs_->Get(recent->job_id()).ok());
  EXPECT_TRUE(jobs_->Get(running->job_id()).ok());
  EXPECT_THAT(registry_.RenderText(), HasSubstr("ringmaster_jobs{state=\"cancelled\"} 1"));
  // Gone from the store too: a restarted coordinator does not bring it back.
  MakeManager();
  EXPECT_EQ(jobs_->Get(old_job->job_id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(jobs_->Get(recent->job_id()).ok());
  // Its request id is free again: the same request makes a new job, whose id is another.
  auto again = jobs_->Submit(Spec(), "req-old", alice_);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->job_id(), old_job->job_id());
  // The recent job, past its retention now, goes at a later pass.
  clock_.Advance(absl::Hours(2));
  jobs_->Tick();
  EXPECT_EQ(jobs_->Get(recent->job_id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(jobs_->Get(running->job_id()).ok());
}

// What a caller sends is bounded before it is stored or echoed: a cancel's reason, and an
// unknown job id quoted back.
TEST_F(JobManagerTest, ACancelReasonAndAnUnknownIdAreBounded) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  auto refused = jobs_->Cancel(job->job_id(), std::string(kMaxCancelReasonBytes + 1, 'r'), alice_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("reason: must be at most 1024 bytes, got 1025"));
  EXPECT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_RUNNING);
  auto unknown = jobs_->Get(std::string(100000, 'j'));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(),
            absl::StrCat("no job \"", std::string(64, 'j'), "\"... (100000 bytes)"));
}

// A deleted job's id is never given to another job: agents remember a job id's generations and
// would take the new job's generation 1 for a stale one. Here every 4-digit id of the name is
// one of a deleted job (in the store's used ids, not among the jobs): the new id is longer.
TEST_F(JobManagerTest, ADeletedJobsIdIsNotGivenAgain) {
  ended_job_retention_ = absl::Hours(1);
  MakeManager();
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(jobs_->Cancel(job->job_id(), "", alice_).ok());
  clock_.Advance(absl::Hours(2));
  jobs_->Tick();
  ASSERT_EQ(jobs_->Get(job->job_id()).status().code(), absl::StatusCode::kNotFound);
  // The other 65,535 4-digit ids of the name, as deleted jobs would have left them.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr), SQLITE_OK);
  for (int suffix = 0; suffix <= 0xffff; ++suffix) {
    const std::string id = absl::StrFormat("gpt-test-%04x", suffix);
    const std::string sql = absl::StrCat("INSERT OR IGNORE INTO used_job_ids VALUES ('", id, "')");
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  }
  ASSERT_EQ(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto next = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_NE(next->job_id(), job->job_id());
  EXPECT_EQ(next->job_id().size(), std::string("gpt-test-").size() + 8);  // widened
}

// A write the store refuses (another process holds it locked past the busy timeout) is written
// again by Tick once the store takes writes: a job cancelled meanwhile is not brought back by a
// coordinator restart.
TEST_F(JobManagerTest, AFailedStoreWriteIsRetriedUntilItLands) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  ASSERT_TRUE(jobs_->Cancel(job->job_id(), "", alice_).ok());  // its write fails (busy)
  EXPECT_THAT(registry_.RenderText(), HasSubstr("ringmaster_store_write_errors_total 1"));
  jobs_->Tick();  // too soon to retry: the store is still locked, nothing more fails
  EXPECT_THAT(registry_.RenderText(), HasSubstr("ringmaster_store_write_errors_total 1"));
  ASSERT_EQ(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  clock_.Advance(absl::Seconds(1));
  jobs_->Tick();
  MakeManager();  // the coordinator restarts: what it finds is what was stored
  EXPECT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(EventsOf(*jobs_->Get(job->job_id()), "state").back().state(), v1::JOB_STATE_CANCELLED);
}

// A generation is in the store before any agent is told to launch it: a coordinator that died
// right after the launch comes back knowing it, and adopts its workers instead of stopping them.
TEST_F(JobManagerTest, AGenerationIsStoredBeforeItsLaunchIsSent) {
  AddNode("n1", 2);
  std::vector<std::pair<int64_t, int64_t>> stored_at_launch;  // (launched, stored) generation
  sink_.on_send = [&](const std::string&, const v1::CoordinatorMessage& m) {
    if (!m.has_launch()) return;
    auto stored = store_->LoadAll();
    ASSERT_TRUE(stored.ok()) << stored.status();
    for (const StoredJob& j : *stored) {
      if (j.status.job_id() != m.launch().job().job_id()) continue;
      EXPECT_EQ(j.status.state(), v1::JOB_STATE_RUNNING);
      stored_at_launch.emplace_back(m.launch().job().generation(), j.status.generation());
    }
  };
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 0, 1));  // restart: generation 2
  sink_.on_send = nullptr;
  EXPECT_EQ(stored_at_launch, (std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 2}}));
}

// A hang report in a phase this coordinator does not know (a newer agent's) is still a hang,
// named by the phase's number.
TEST_F(JobManagerTest, AHangInAPhaseThisCoordinatorDoesNotKnowIsNamedByNumber) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::WorkerState hung = HangReport(Current(job->job_id()), 1, 12.5);
  hung.set_phase(static_cast<v1::WorkerPhase>(42));
  jobs_->OnWorkerState("n1", hung);
  auto after = jobs_->Get(job->job_id());
  EXPECT_EQ(after->job().generation(), 2);
  std::vector<v1::JobEvent> hangs = EventsOf(*after, "hang");
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].message(),
            "rank 1 on n1 made no progress for 12.5 s in phase unknown (42): hung");
}

// An agent's report about a rank the job does not have, or one placed on another node, changes
// nothing: not an exit, not a finished rank, not a hang.
TEST_F(JobManagerTest, ReportsAboutRanksThatAreNotTheReportingNodesAreIgnored) {
  AddNode("n1", 2);
  AddNode("n2", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus gen1 = Current(job->job_id());
  const std::string node = gen1.assignments(0).node(), other = node == "n1" ? "n2" : "n1";
  jobs_->OnWorkerState(node, Exit(gen1, 2, 1));   // no rank 2
  jobs_->OnWorkerState(node, Exit(gen1, -1, 1));  // nor -1
  jobs_->OnWorkerState(other, Exit(gen1, 0, 1));  // rank 0 is not on `other`
  jobs_->OnWorkerState(other, HangReport(gen1, 1, 30));
  jobs_->OnWorkerState(node, Exit(gen1, 7, 0));  // a "finished" rank that does not exist
  jobs_->OnWorkerState(node, Exit(gen1, 0, 0));
  v1::JobStatus now = Current(job->job_id());
  EXPECT_EQ(now.state(), v1::JOB_STATE_RUNNING);  // rank 1 has not finished
  EXPECT_EQ(now.generation(), 1);
  jobs_->OnWorkerState(node, Exit(gen1, 1, 0));
  EXPECT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_SUCCEEDED);
}

// The agents stop the hung generation; the blamed rank's exit says what it was doing.
TEST_F(JobManagerTest, TheBlamedRanksExitIsQuotedOnceAfterTheHang) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus gen1 = Current(job->job_id());
  jobs_->OnWorkerState("n1", HangReport(gen1, 1, 12.5));
  ASSERT_EQ(Current(job->job_id()).generation(), 2);
  EXPECT_TRUE(EventsOf(*jobs_->Get(job->job_id()), "suspect_exit").empty());

  // Rank 0 was not blamed: its exit says nothing.
  v1::WorkerState peer = Exit(gen1, 0, -1, 15);
  peer.set_exit_reason("last output before the stop: step 4 loss 3.2");
  jobs_->OnWorkerState("n1", peer);
  EXPECT_TRUE(EventsOf(*jobs_->Get(job->job_id()), "suspect_exit").empty());
  v1::WorkerState blamed = Exit(gen1, 1, -1, 15);
  blamed.set_exit_reason("last output before the stop: waiting for shard 7\n");
  jobs_->OnWorkerState("n1", blamed);
  jobs_->OnWorkerState("n1", blamed);  // a replay (the agent's registration) changes nothing

  auto after = jobs_->Get(job->job_id());
  std::vector<v1::JobEvent> quoted = EventsOf(*after, "suspect_exit");
  ASSERT_EQ(quoted.size(), 1u);
  EXPECT_EQ(quoted[0].message(),
            "blamed for the hang: rank 1 on n1 was killed by signal 15: last output before the "
            "stop: waiting for shard 7");
  EXPECT_EQ(quoted[0].generation(), 1);
  ASSERT_EQ(quoted[0].ranks_size(), 1);
  EXPECT_EQ(quoted[0].ranks(0), 1);
  // The relaunched generation runs on, untouched by its predecessor's exits.
  EXPECT_EQ(after->job().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(after->job().generation(), 2);
  EXPECT_EQ(after->job().restarts(), 1);
  // An exit of the new generation's rank 1 is a failure of its own, not a quote.
  jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 1, 1));
  EXPECT_EQ(EventsOf(*jobs_->Get(job->job_id()), "suspect_exit").size(), 1u);
  EXPECT_EQ(jobs_->Get(job->job_id())->job().state(), v1::JOB_STATE_FAILED);
}

TEST_F(JobManagerTest, HangNamesTheRankThatNeverEnteredTheCollectiveItsGroupWaitsIn) {
  AddNode("n1", 4);
  auto job = jobs_->Submit(Spec(1, 4), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  // Ranks 0, 1, 3 entered all-reduce #8 and wait; rank 2 stopped after #7.
  for (int rank : {0, 1, 3}) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
  jobs_->OnStepSummary(Summary(gen1, 2, 4, 7, 7));
  // Rank 0's agent reports it silent first: the event still names rank 2.
  v1::WorkerState hung = HangReport(gen1, 0, 11);
  jobs_->OnWorkerState("n1", hung);
  auto after = jobs_->Get(job->job_id());
  std::vector<v1::JobEvent> hangs = EventsOf(*after, "hang");
  ASSERT_EQ(hangs.size(), 1u);
  ASSERT_EQ(hangs[0].ranks_size(), 1);
  EXPECT_EQ(hangs[0].ranks(0), 2);
  EXPECT_NE(hangs[0].message().find("rank 2 has not entered collective #8 of dp0 (it is at #7) "
                                    "that ranks 0, 1, 3 wait in"),
            std::string::npos)
      << hangs[0].message();
  const std::string suspect =
      "ringmaster_hang_suspect{job_id=\"" + job->job_id() + "\",rank=\"2\"} 1";
  EXPECT_NE(registry_.RenderText().find(suspect), std::string::npos) << registry_.RenderText();
  EXPECT_EQ(after->job().generation(), 2);

  // Generation 2 recovers within a fraction of a scrape interval: the suspect stays visible
  // for 5 minutes after that, so that Prometheus sees it, then goes.
  v1::JobStatus gen2 = Current(job->job_id());
  for (int rank = 0; rank < 4; ++rank) {
    v1::StepSummary s = Summary(gen2, rank, 5, 1, 1);
    s.set_process_start_unix_nanos(absl::ToUnixNanos(clock_.Now()));
    s.set_first_step_seconds(0.1);
    jobs_->OnStepSummary(s);
  }
  ASSERT_EQ(EventsOf(*jobs_->Get(job->job_id()), "recovered").size(), 1u);
  clock_.Advance(absl::Minutes(4));
  jobs_->Tick();
  EXPECT_NE(registry_.RenderText().find(suspect), std::string::npos);
  clock_.Advance(absl::Minutes(1));
  jobs_->Tick();
  EXPECT_EQ(registry_.RenderText().find("ringmaster_hang_suspect{"), std::string::npos);
}

TEST_F(JobManagerTest, HangNamesTheRankWhoseProcessStoppedReportingWhenNoneLags) {
  AddNode("n1", 4);
  auto job = jobs_->Submit(Spec(1, 4), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  // Everyone entered #8 (rank 2 was stopped inside it): the numbers name nobody...
  for (int rank = 0; rank < 4; ++rank) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
  // ...but rank 2's process went quiet while the others keep reporting.
  for (int second = 0; second < 5; ++second) {
    clock_.Advance(absl::Seconds(1));
    for (int rank : {0, 1, 3}) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
  }
  v1::WorkerState hung = HangReport(gen1, 3, 5);
  jobs_->OnWorkerState("n1", hung);
  std::vector<v1::JobEvent> hangs = EventsOf(*jobs_->Get(job->job_id()), "hang");
  ASSERT_EQ(hangs.size(), 1u);
  ASSERT_EQ(hangs[0].ranks_size(), 1);
  EXPECT_EQ(hangs[0].ranks(0), 2);
  EXPECT_NE(hangs[0].message().find("rank 2's process stopped reporting 5.0 s ago"),
            std::string::npos)
      << hangs[0].message();
  // The relaunched generation's rank 2 is marked until the suspects' series go.
  auto relaunched = jobs_->Get(job->job_id());
  ASSERT_EQ(relaunched->job().state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(relaunched->ranks_size(), 4);
  EXPECT_TRUE(relaunched->ranks(2).hang_suspect());
  EXPECT_FALSE(relaunched->ranks(1).hang_suspect());
}

TEST_F(JobManagerTest, AnEarlyHangReportWaitsForTheStoppedProcessToFallSilent) {
  AddNode("n1", 4);
  auto job = jobs_->Submit(Spec(1, 4), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  // Rank 2 is stopped inside #8 right after its last summary; the others keep reporting.
  for (int rank = 0; rank < 4; ++rank) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
  clock_.Advance(absl::Seconds(1));
  for (int rank : {0, 1, 3}) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
  // A 1.5 s hang_timeout: rank 0's agent reports it before rank 2 has been silent long enough
  // to tell it from a live process, and the numbers name nobody. No verdict yet.
  v1::WorkerState hung = HangReport(gen1, 0, 1.5);
  jobs_->OnWorkerState("n1", hung);
  hung.set_rank(1);
  jobs_->OnWorkerState("n1", hung);  // a second report while the first waits changes nothing
  jobs_->Tick();
  EXPECT_TRUE(EventsOf(*jobs_->Get(job->job_id()), "hang").empty());
  EXPECT_EQ(Current(job->job_id()).generation(), 1);
  // Once rank 2 is silent for more than 2.5 s while the others report, the verdict names it.
  int ticks = 0;
  while (EventsOf(*jobs_->Get(job->job_id()), "hang").empty() && ticks < 20) {
    clock_.Advance(absl::Milliseconds(500));
    for (int rank : {0, 1, 3}) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
    jobs_->Tick();
    ++ticks;
  }
  EXPECT_EQ(ticks, 4);  // 3 s after rank 2's last summary
  std::vector<v1::JobEvent> hangs = EventsOf(*jobs_->Get(job->job_id()), "hang");
  ASSERT_EQ(hangs.size(), 1u);
  ASSERT_EQ(hangs[0].ranks_size(), 1);
  EXPECT_EQ(hangs[0].ranks(0), 2);
  EXPECT_NE(hangs[0].message().find("rank 0 on n1 made no progress for 1.5 s in phase step: "
                                    "hung; rank 2's process stopped reporting 3.0 s ago"),
            std::string::npos)
      << hangs[0].message();
  EXPECT_EQ(Current(job->job_id()).generation(), 2);
  EXPECT_NE(registry_.RenderText().find("ringmaster_hang_suspect{job_id=\"" + job->job_id() +
                                        "\",rank=\"2\"} 1"),
            std::string::npos);
}

TEST_F(JobManagerTest, AnEarlyHangReportWithNoEvidenceNamesTheReportedRankAfterTheWait) {
  AddNode("n1", 4);
  auto job = jobs_->Submit(Spec(1, 4), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  // Every rank waits inside #8 and every process keeps reporting (a deadlock in the library).
  for (int rank = 0; rank < 4; ++rank) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
  v1::WorkerState hung = HangReport(gen1, 1, 1);
  jobs_->OnWorkerState("n1", hung);
  int ticks = 0;
  while (EventsOf(*jobs_->Get(job->job_id()), "hang").empty() && ticks < 20) {
    clock_.Advance(absl::Milliseconds(500));
    for (int rank = 0; rank < 4; ++rank) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
    jobs_->Tick();
    ++ticks;
  }
  EXPECT_EQ(ticks, 6);  // 4 s after the hang began, 1 s before the report
  std::vector<v1::JobEvent> hangs = EventsOf(*jobs_->Get(job->job_id()), "hang");
  ASSERT_EQ(hangs.size(), 1u);
  ASSERT_EQ(hangs[0].ranks_size(), 1);
  EXPECT_EQ(hangs[0].ranks(0), 1);
  EXPECT_EQ(hangs[0].message(), "rank 1 on n1 made no progress for 1.0 s in phase step: hung");
  EXPECT_EQ(Current(job->job_id()).generation(), 2);
}

TEST_F(JobManagerTest, StragglerIsFlaggedWithAnEventAndAMetricWithoutRestart) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(1, 2), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  for (int step = 1; step <= 12; ++step) {
    jobs_->OnStepSummary(Summary(gen1, 0, step, 2 * step, 2 * step, 0.10));
    jobs_->OnStepSummary(Summary(gen1, 1, step, 2 * step, 2 * step, 0.15));
  }
  auto after = jobs_->Get(job->job_id());
  std::vector<v1::JobEvent> flagged = EventsOf(*after, "straggler");
  ASSERT_EQ(flagged.size(), 1u);
  EXPECT_EQ(flagged[0].ranks(0), 1);
  EXPECT_NE(flagged[0].message().find("rank 1 on n1 computes 1.50x the median of its "
                                      "data-parallel group dp0 (threshold 1.20) at step 9: "
                                      "straggler"),
            std::string::npos)
      << flagged[0].message();
  EXPECT_EQ(after->job().generation(), 1);  // no restart
  EXPECT_NE(registry_.RenderText().find("ringmaster_straggler{job_id=\"" + job->job_id() +
                                        "\",rank=\"1\"} 1"),
            std::string::npos);
  ASSERT_EQ(after->ranks_size(), 2);  // and `ringctl describe` says so
  EXPECT_TRUE(after->ranks(1).straggler());
  EXPECT_NEAR(after->ranks(1).compute_ratio(), 1.5, 1e-9);
  EXPECT_FALSE(after->ranks(0).straggler());
  // Back to normal: cleared, the series stays at 0 until the job ends.
  for (int step = 13; step <= 40; ++step) {
    jobs_->OnStepSummary(Summary(gen1, 0, step, 2 * step, 2 * step, 0.10));
    jobs_->OnStepSummary(Summary(gen1, 1, step, 2 * step, 2 * step, 0.10));
  }
  after = jobs_->Get(job->job_id());
  ASSERT_EQ(EventsOf(*after, "straggler").size(), 2u);
  EXPECT_NE(registry_.RenderText().find("ringmaster_straggler{job_id=\"" + job->job_id() +
                                        "\",rank=\"1\"} 0"),
            std::string::npos);
  ASSERT_TRUE(jobs_->Cancel(job->job_id(), "", alice_).ok());
  EXPECT_EQ(registry_.RenderText().find("ringmaster_straggler{"), std::string::npos);
}

TEST_F(JobManagerTest, ARunningJobsRanksSayTheirStepAndWhenTheyWereLastHeardOf) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(1, 2), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus running = Current(job->job_id());
  jobs_->OnStepSummary(Summary(running, 0, 7, 7, 7));
  clock_.Advance(absl::Milliseconds(2500));
  auto got = jobs_->Get(job->job_id());
  ASSERT_EQ(got->ranks_size(), 2);
  EXPECT_EQ(got->ranks(0).rank(), 0);
  EXPECT_EQ(got->ranks(0).step(), 7);
  EXPECT_DOUBLE_EQ(got->ranks(0).last_report_age_seconds(), 2.5);
  EXPECT_EQ(got->ranks(1).step(), 0);
  EXPECT_EQ(got->ranks(1).last_report_age_seconds(), -1);  // never heard of
  EXPECT_FALSE(got->ranks(1).finished());
  jobs_->OnWorkerState("n1", Exit(running, 1, 0));
  got = jobs_->Get(job->job_id());
  EXPECT_TRUE(got->ranks(1).finished());
  EXPECT_FALSE(got->ranks(1).hang_suspect());
  // Only a running job has them.
  ASSERT_TRUE(jobs_->Cancel(job->job_id(), "", alice_).ok());
  EXPECT_EQ(jobs_->Get(job->job_id())->ranks_size(), 0);
}

// The value of the series `series` (name and labels, as rendered) on `page`; NaN if absent.
double SeriesValue(const std::string& page, const std::string& series) {
  const size_t at = page.find(series + " ");
  double value = std::numeric_limits<double>::quiet_NaN();
  if (at == std::string::npos) return value;
  const size_t begin = at + series.size() + 1;
  (void)absl::SimpleAtod(page.substr(begin, page.find('\n', begin) - begin), &value);
  return value;
}

// Rank `rank`'s link check: its dp0 ring neighbours (in a ring of `world`), at `gbps[edge]` GB/s
// for the edge between ranks edge and edge+1.
v1::LinkReport Links(const v1::JobStatus& job, int rank, int world, const std::vector<double>& gbps,
                     double seconds = 0.05) {
  v1::LinkReport r;
  *r.mutable_job() = Generation(job);
  r.set_rank(rank);
  r.set_seconds(seconds);
  for (const int edge : {rank, (rank + world - 1) % world}) {
    v1::LinkStat* l = r.add_links();
    l->set_group("dp0");
    l->set_peer_rank(edge == rank ? (rank + 1) % world : edge);
    l->set_bytes(4 << 20);
    l->set_seconds((4 << 20) / (gbps[edge] * 1e9));
  }
  return r;
}

TEST_F(JobManagerTest, ASlowLinkIsNamedWithItsRanksAndNodesOnceEveryRankReported) {
  const TwoNodeJob job = RunOnTwoNodes();
  ASSERT_FALSE(job.id.empty());
  const v1::JobStatus& running = job.running;
  const std::vector<std::string>& node = job.node;
  ASSERT_EQ(node[0], node[1]);
  ASSERT_EQ(node[2], node[3]);
  ASSERT_NE(node[1], node[2]);
  // Edges 0-1 and 2-3 inside a node, 1-2 and 3-0 across; 1-2 is slow.
  const std::vector<double> gbps = {20, 0.1, 20, 2};
  for (int rank = 0; rank < 3; ++rank) jobs_->OnLinkReport(Links(running, rank, 4, gbps));
  jobs_->OnLinkReport(Links(running, 2, 4, {9, 9, 9, 9}));  // a repeat: ignored
  auto partial = jobs_->Get(job.id);
  EXPECT_EQ(partial->link_check().ranks_reported(), 3);
  EXPECT_EQ(partial->link_check().ranks_expected(), 4);
  EXPECT_TRUE(EventsOf(*partial, "slow_link").empty());  // judged once all reported

  jobs_->OnLinkReport(Links(running, 3, 4, gbps));
  auto got = jobs_->Get(job.id);
  const v1::LinkCheckSummary& check = got->link_check();
  EXPECT_EQ(check.generation(), running.generation());
  EXPECT_EQ(check.ranks_reported(), 4);
  ASSERT_EQ(check.slow_size(), 1) << check.DebugString();
  EXPECT_EQ(check.slow(0).rank(), 1);
  EXPECT_EQ(check.slow(0).peer_rank(), 2);
  EXPECT_EQ(check.slow(0).node(), node[1]);
  EXPECT_EQ(check.slow(0).peer_node(), node[2]);
  const std::vector<v1::JobEvent> slow = EventsOf(*got, "slow_link");
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_THAT(slow[0].ranks(), ::testing::ElementsAre(1, 2));
  EXPECT_EQ(slow[0].message(),
            absl::StrCat("dp0: rank 1 (", node[1], ") <-> rank 2 (", node[2],
                         "): 0.10 GB/s each way, 0.05x the median of the other dp links "
                         "across nodes (2.00 GB/s): slow (threshold 0.50x)"));
  std::string page = registry_.RenderText();
  EXPECT_NEAR(SeriesValue(page, absl::StrCat("ringmaster_slow_link{job_id=\"", job.id,
                                             "\",group=\"dp0\",rank=\"1\",peer_rank=\"2\","
                                             "node=\"",
                                             node[1], "\",peer_node=\"", node[2], "\"}")),
              0.05, 1e-9)
      << page;
  const std::string bandwidth = absl::StrCat("ringmaster_link_bandwidth_bytes_per_second{job_id=\"",
                                             job.id, "\",kind=\"dp\",");
  EXPECT_NEAR(SeriesValue(page, bandwidth + "scope=\"inter_node\",stat=\"min\"}"), 1e8, 1) << page;
  EXPECT_NEAR(SeriesValue(page, bandwidth + "scope=\"inter_node\",stat=\"median\"}"), 1.05e9, 1);
  EXPECT_NEAR(SeriesValue(page, bandwidth + "scope=\"intra_node\",stat=\"median\"}"), 2e10, 10);

  // The next generation's verdict replaces the series: its links are all fine.
  jobs_->OnWorkerState(node[0], Exit(running, 0, 75));
  const v1::JobStatus gen2 = Current(job.id);
  ASSERT_EQ(gen2.generation(), running.generation() + 1);
  EXPECT_EQ(jobs_->Get(job.id)->link_check().ranks_reported(), 0);
  EXPECT_FALSE(jobs_->Get(job.id)->has_link_check());
  jobs_->OnLinkReport(Links(running, 0, 4, gbps));  // the old generation's: ignored
  EXPECT_FALSE(jobs_->Get(job.id)->has_link_check());
  for (int rank = 0; rank < 4; ++rank) jobs_->OnLinkReport(Links(gen2, rank, 4, {20, 2, 20, 2}));
  EXPECT_EQ(jobs_->Get(job.id)->link_check().slow_size(), 0);
  page = registry_.RenderText();
  EXPECT_EQ(page.find("ringmaster_slow_link{"), std::string::npos) << page;
  EXPECT_NE(page.find("ringmaster_link_bandwidth_bytes_per_second{"), std::string::npos);
  // The job's end removes them all.
  ASSERT_TRUE(jobs_->Cancel(job.id, "", alice_).ok());
  EXPECT_EQ(registry_.RenderText().find("ringmaster_link_bandwidth_bytes_per_second{"),
            std::string::npos);
}

TEST_F(JobManagerTest, ALinkThatCorruptsDataIsNamedEvenWithNothingToCompareItWith) {
  AddNode("n1", 1);
  AddNode("n2", 1);
  auto job = jobs_->Submit(Spec(2, 1), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus running = Current(job->job_id());
  for (int rank = 0; rank < 2; ++rank) {
    v1::LinkReport r;
    *r.mutable_job() = Generation(running);
    r.set_rank(rank);
    v1::LinkStat* l = r.add_links();
    l->set_group("dp0");
    l->set_peer_rank(1 - rank);
    l->set_bytes(1000);
    l->set_seconds(1e-6);
    l->set_wrong(rank == 1 ? 3 : 0);
    v1::LinkStat* bogus = r.add_links();  // a peer outside the job: dropped
    *bogus = *l;
    bogus->set_peer_rank(7);
    jobs_->OnLinkReport(r);
  }
  auto got = jobs_->Get(job->job_id());
  ASSERT_EQ(got->link_check().slow_size(), 1);
  EXPECT_EQ(got->link_check().slow(0).wrong(), 3);
  const std::vector<v1::JobEvent> slow = EventsOf(*got, "slow_link");
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_THAT(slow[0].message(),
              ::testing::EndsWith("1.00 GB/s each way; 3 elements arrived wrong: the link "
                                  "corrupts data"));
}

TEST_F(JobManagerTest, ARequestedLinkCheckGoesToRankZerosNodeAndItsResultReplacesTheStartOne) {
  const TwoNodeJob job = RunOnTwoNodes();
  ASSERT_FALSE(job.id.empty());
  const v1::JobStatus& running = job.running;
  // Only its owner or an admin may ask.
  EXPECT_EQ(jobs_->RequestLinkCheck(job.id, Caller{"mallory", false}).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(jobs_->RequestLinkCheck("nope", alice_).status().code(), absl::StatusCode::kNotFound);
  const std::vector<double> fine = {10, 2, 10, 2}, slow = {10, 0.1, 10, 2};
  for (int rank = 0; rank < 4; ++rank) jobs_->OnLinkReport(Links(running, rank, 4, fine, 0.2));
  // Not before the generation trains: rank 0 may not run yet.
  auto early = jobs_->RequestLinkCheck(job.id, alice_);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(early.status().message()), HasSubstr("has not completed a step yet"));
  jobs_->OnStepSummary(Summary(running, 0, 1, 1, 1));
  sink_.sent.clear();
  auto requested = jobs_->RequestLinkCheck(job.id, alice_);
  ASSERT_TRUE(requested.ok()) << requested.status();
  EXPECT_EQ(requested->job().job_id(), job.id);
  ASSERT_EQ(sink_.sent.size(), 1u);
  EXPECT_EQ(sink_.sent[0].first, running.assignments(0).node());
  ASSERT_TRUE(sink_.sent[0].second.has_check_links());
  EXPECT_EQ(sink_.sent[0].second.check_links().job().generation(), running.generation());
  EXPECT_EQ(sink_.sent[0].second.check_links().rank(), 0);
  // The check after step 40: its reports replace the start-up check's summary and series.
  for (int rank = 0; rank < 3; ++rank) {
    v1::LinkReport r = Links(running, rank, 4, slow, 0.3);
    r.set_step(40);
    jobs_->OnLinkReport(r);
  }
  v1::LinkReport old = Links(running, 3, 4, fine);  // a late start-up report: superseded
  jobs_->OnLinkReport(old);
  EXPECT_EQ(jobs_->Get(job.id)->link_check().ranks_reported(), 3);
  v1::LinkReport last = Links(running, 3, 4, slow, 0.3);
  last.set_step(40);
  jobs_->OnLinkReport(last);
  const auto got = jobs_->Get(job.id);
  EXPECT_EQ(got->link_check().step(), 40);
  ASSERT_EQ(got->link_check().slow_size(), 1);
  EXPECT_EQ(got->link_check().slow(0).rank(), 1);
  const std::vector<v1::JobEvent> checks = EventsOf(*got, "link_check");
  std::vector<std::string> messages;
  for (const v1::JobEvent& e : checks) messages.push_back(e.message());
  EXPECT_THAT(messages,
              ::testing::ElementsAre(
                  "link check requested by alice: the ranks run it after an upcoming step",
                  "link check after step 40: 4 links, 1 slow or corrupting"));
  // What ringctl check-links --wait reads: the request's event, then the verdict's step and the
  // ends of the link it names.
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[0].sequence(), requested->request_sequence());
  EXPECT_EQ(checks[0].step(), 0);
  EXPECT_EQ(checks[1].step(), 40);
  EXPECT_THAT(checks[1].ranks(), ::testing::ElementsAre(1, 2));
  EXPECT_EQ(EventsOf(*got, "slow_link").size(), 1u);
  // Not running any more: refused.
  ASSERT_TRUE(jobs_->Cancel(job.id, "", alice_).ok());
  auto refused = jobs_->RequestLinkCheck(job.id, alice_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("is CANCELLED: only a running job's links can be checked"));
}

TEST_F(JobManagerTest, ALinkCheckCannotBeRequestedForAJobThatTurnedItOffOrHasOneRank) {
  AddNode("n1", 2);
  v1::JobSpec spec = Spec();
  spec.mutable_watchdog()->set_link_check_disabled(true);
  auto job = jobs_->Submit(spec, "", alice_);
  ASSERT_TRUE(job.ok());
  auto refused = jobs_->RequestLinkCheck(job->job_id(), alice_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("watchdog.link_check: false"));
  AddNode("n2", 1);
  auto single = jobs_->Submit(Spec(1, 1), "", alice_);
  ASSERT_TRUE(single.ok());
  refused = jobs_->RequestLinkCheck(single->job_id(), alice_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("has no link to check"));
}

// The rank that received wrong data exits at once (75), so the generation ends before the other
// ranks report: the corruption is named from that one report, and its series outlives the
// generation until the next one's check is complete.
TEST_F(JobManagerTest, ACorruptingLinkIsNamedBeforeItsRankExitsAndTheOthersReport) {
  const TwoNodeJob job = RunOnTwoNodes();
  ASSERT_FALSE(job.id.empty());
  const v1::JobStatus& running = job.running;
  const std::vector<std::string>& node = job.node;
  v1::LinkReport corrupt = Links(running, 2, 4, {10, 10, 10, 10});
  corrupt.mutable_links(1)->set_wrong(5);  // from rank 1
  jobs_->OnLinkReport(corrupt);
  jobs_->OnWorkerState(node[2], Exit(running, 2, 75));
  const auto got = jobs_->Get(job.id);
  ASSERT_EQ(got->job().generation(), running.generation() + 1);
  const std::vector<v1::JobEvent> named = EventsOf(*got, "slow_link");
  ASSERT_EQ(named.size(), 1u);
  EXPECT_THAT(named[0].ranks(), ::testing::ElementsAre(1, 2));
  EXPECT_EQ(named[0].message(),
            absl::StrCat("dp0: rank 1 (", node[1], ") <-> rank 2 (", node[2],
                         "): 10.00 GB/s each way; 5 elements arrived wrong: the link corrupts "
                         "data"));
  const std::string series = absl::StrCat("ringmaster_slow_link{job_id=\"", job.id,
                                          "\",group=\"dp0\",rank=\"1\",peer_rank=\"2\",");
  EXPECT_NE(registry_.RenderText().find(series), std::string::npos);
  // Generation 2's links are fine: its verdict removes the series.
  const v1::JobStatus gen2 = got->job();
  for (int rank = 0; rank < 4; ++rank) jobs_->OnLinkReport(Links(gen2, rank, 4, {10, 10, 10, 10}));
  EXPECT_EQ(registry_.RenderText().find(series), std::string::npos);
  EXPECT_EQ(EventsOf(*jobs_->Get(job.id), "slow_link").size(), 1u);
}

TEST_F(JobManagerTest, RecoveryPhasesAreMeasuredOnceEveryRankOfTheNewGenerationStepped) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(1, 2), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::WorkerState killed = Exit(Current(job->job_id()), 1, -1, 9);
  killed.set_time_unix_nanos(absl::ToUnixNanos(clock_.Now() - absl::Milliseconds(100)));
  jobs_->OnWorkerState("n1", killed);
  v1::JobStatus gen2 = Current(job->job_id());
  ASSERT_EQ(gen2.generation(), 2);
  // The link check comes before the first step; the slowest rank's is the phase.
  jobs_->OnLinkReport(Links(gen2, 0, 2, {10, 10}, 0.1));
  jobs_->OnLinkReport(Links(gen2, 1, 2, {10, 10}, 0.25));
  for (int rank = 0; rank < 2; ++rank) {
    v1::StepSummary s = Summary(gen2, rank, 21, 2, 2);
    s.set_process_start_unix_nanos(absl::ToUnixNanos(clock_.Now() + absl::Milliseconds(200)));
    s.set_rendezvous_seconds(0.3);
    s.set_restore_seconds(0.05);
    s.set_first_step_seconds(0.1);
    s.set_start_step(20);
    s.set_step_end_unix_nanos(absl::ToUnixNanos(clock_.Now() + absl::Seconds(1)));
    jobs_->OnStepSummary(s);
  }
  std::vector<v1::JobEvent> recovered = EventsOf(*jobs_->Get(job->job_id()), "recovered");
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_NE(recovered[0].message().find("recovery took 1.00 s: detect 0.10, place 0.00, stop "
                                        "0.20, rendezvous 0.30, link check 0.25, restore 0.05, "
                                        "first step 0.10"),
            std::string::npos)
      << recovered[0].message();
  jobs_->Tick();
  const std::string page = registry_.RenderText();
  EXPECT_NE(
      page.find("ringmaster_recovery_seconds{job_id=\"" + job->job_id() + "\",phase=\"total\"} 1"),
      std::string::npos)
      << page;
  EXPECT_NE(page.find("ringmaster_recovery_seconds{job_id=\"" + job->job_id() +
                      "\",phase=\"link_check\"} 0.25"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("ringmaster_goodput_ratio{job_id=\"" + job->job_id() + "\"}"),
            std::string::npos);
}

// A restarted generation reports the checkpoint it resumed from: that is not a new checkpoint, so
// the job's newest-checkpoint time (RingmasterCheckpointStale's age) stays that of its commit.
TEST_F(JobManagerTest, ResumingFromACheckpointDoesNotMakeItNewer) {
  AddNode("n1", 2);
  v1::JobSpec spec = Spec(1, 2);
  spec.mutable_restart()->set_max_restarts(3);
  auto job = jobs_->Submit(spec, "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus gen1 = Current(job->job_id());
  const std::string node = gen1.assignments(0).node();
  const std::string series = absl::StrCat(
      "ringmaster_job_last_checkpoint_timestamp_seconds{job_id=\"", job->job_id(), "\"} ");
  // The exported value; -1 without the series.
  auto timestamp = [&]() -> double {
    const std::string page = registry_.RenderText();
    const size_t at = page.find(series);
    double value = -1;
    if (at != std::string::npos) {
      const size_t from = at + series.size();
      EXPECT_TRUE(absl::SimpleAtod(page.substr(from, page.find('\n', from) - from), &value));
    }
    return value;
  };
  auto now = [&] { return absl::ToDoubleSeconds(clock_.Now() - absl::UnixEpoch()); };
  clock_.Advance(absl::Seconds(10));
  const double committed_at = now();
  for (int rank = 0; rank < 2; ++rank) {
    v1::StepSummary s = Summary(gen1, rank, 200, 1, 1);
    s.set_checkpoint_step(200);
    jobs_->OnStepSummary(s);
  }
  jobs_->Tick();
  ASSERT_EQ(timestamp(), committed_at) << registry_.RenderText();

  jobs_->OnWorkerState(node, Exit(gen1, 0, 75));
  const v1::JobStatus gen2 = Current(job->job_id());
  ASSERT_EQ(gen2.generation(), gen1.generation() + 1);
  clock_.Advance(absl::Minutes(5));
  for (int rank = 0; rank < 2; ++rank) {
    v1::StepSummary s = Summary(gen2, rank, 201, 1, 1);
    s.set_checkpoint_step(200);  // resumed from it
    jobs_->OnStepSummary(s);
  }
  jobs_->Tick();
  EXPECT_EQ(timestamp(), committed_at) << "the resumed checkpoint is not new";
  EXPECT_EQ(Current(job->job_id()).progress().checkpoint_step(), 200);

  clock_.Advance(absl::Seconds(30));
  v1::StepSummary newer = Summary(gen2, 0, 300, 2, 2);
  newer.set_checkpoint_step(300);
  jobs_->OnStepSummary(newer);
  jobs_->Tick();
  EXPECT_EQ(timestamp(), now());
}

TEST_F(JobManagerTest, ANodeThatFailedTwiceInARowIsExcludedWhileSpareCapacityExists) {
  AddNode("n1", 2);
  AddNode("n2", 2);
  v1::JobSpec spec = Spec(1, 2);
  spec.mutable_restart()->set_max_restarts(5);
  auto job = jobs_->Submit(spec, "", alice_);
  ASSERT_TRUE(job.ok());
  const std::string first = Current(job->job_id()).assignments(0).node();
  jobs_->OnWorkerState(first, Exit(Current(job->job_id()), 0, 1));
  // Best-fit places it on the same node again; a second failure there excludes it.
  v1::JobStatus gen2 = Current(job->job_id());
  ASSERT_EQ(gen2.assignments(0).node(), first);
  jobs_->OnWorkerState(first, Exit(gen2, 0, 1));
  v1::JobStatus gen3 = Current(job->job_id());
  EXPECT_EQ(gen3.generation(), 3);
  EXPECT_NE(gen3.assignments(0).node(), first);
  ASSERT_EQ(EventsOf(*jobs_->Get(job->job_id()), "exclude").size(), 1u);
}

TEST_F(JobManagerTest, AnExcludedNodeIsUsedWhenNothingElseFits) {
  AddNode("n1", 2);
  v1::JobSpec spec = Spec(1, 2);
  spec.mutable_restart()->set_max_restarts(5);
  auto job = jobs_->Submit(spec, "", alice_);
  ASSERT_TRUE(job.ok());
  jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 0, 1));
  jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 0, 1));
  v1::JobStatus gen3 = Current(job->job_id());
  EXPECT_EQ(gen3.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(gen3.generation(), 3);
  EXPECT_EQ(gen3.assignments(0).node(), "n1");
}

// Generations that fail before their first step back off: the first relaunch is immediate, then
// 1 s, 2 s, 4 s (the maximum here), 4 s; a generation that steps resets it.
TEST_F(JobManagerTest, CrashLoopsBackOffUntilAGenerationSteps) {
  const std::string id = SubmitOnOneNode(absl::Seconds(1));
  ASSERT_FALSE(id.empty());
  // Fails generation `generation` before any step; returns how long its relaunch waited, in
  // whole seconds of the fake clock (Tick is the coordinator's 10 Hz ticker).
  auto fail_and_wait = [&](int64_t generation) {
    EXPECT_EQ(Current(id).generation(), generation);
    jobs_->OnWorkerState("n1", Exit(Current(id), 0, 1));
    int waited = 0;
    for (; Current(id).state() == v1::JOB_STATE_RESTARTING && waited < 10; ++waited) {
      EXPECT_THAT(Current(id).reason(), HasSubstr("crash loop"));
      clock_.Advance(absl::Seconds(1));
      jobs_->Tick();
    }
    EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RUNNING);
    EXPECT_EQ(Current(id).generation(), generation + 1);
    return waited;
  };
  EXPECT_EQ(fail_and_wait(1), 0);
  EXPECT_EQ(fail_and_wait(2), 1);
  // A summary without steps (a phase or collective report) is not progress.
  v1::StepSummary phase_only = Summary(Current(id), 0, 0, 1, 1);
  phase_only.set_steps_in_summary(0);
  jobs_->OnStepSummary(phase_only);
  EXPECT_EQ(fail_and_wait(3), 2);
  EXPECT_EQ(fail_and_wait(4), 4);
  EXPECT_EQ(fail_and_wait(5), 4);
  auto events = jobs_->Get(id);
  bool explained = false;
  for (const auto& e : events->events()) {
    if (absl::StrContains(e.message(),
                          "restart 3 of 10 in 2s (crash loop: 3 generations in a "
                          "row failed before their first step)")) {
      explained = true;
    }
  }
  EXPECT_TRUE(explained);
  // Generation 6 trains, then fails: relaunched at once, and the count starts again.
  jobs_->OnStepSummary(Summary(Current(id), 0, 10, 1, 1));
  EXPECT_EQ(fail_and_wait(6), 0);
  EXPECT_EQ(fail_and_wait(7), 0);
  EXPECT_EQ(fail_and_wait(8), 1);
}

TEST_F(JobManagerTest, ACrashLoopsBackoffSurvivesACoordinatorRestart) {
  const std::string id = SubmitOnOneNode(absl::Seconds(2));  // then 4 s, the most
  ASSERT_FALSE(id.empty());
  jobs_->OnWorkerState("n1", Exit(Current(id), 0, 1));  // relaunched at once
  jobs_->OnWorkerState("n1", Exit(Current(id), 0, 1));  // waits 2 s
  ASSERT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  clock_.Advance(absl::Seconds(1));

  MakeManager();  // the coordinator restarts; its node registers again
  AddNode("n1", 2);
  jobs_->Tick();
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  clock_.Advance(absl::Seconds(1));
  jobs_->Tick();
  ASSERT_EQ(Current(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Current(id).generation(), 3);
  // The count of failures in a row goes on too: the third waits twice as long.
  jobs_->OnWorkerState("n1", Exit(Current(id), 0, 1));
  EXPECT_THAT(Current(id).reason(), HasSubstr("in 4s (crash loop: 3 generations"));
  // A generation that steps ends the loop, for good.
  MakeManager();
  AddNode("n1", 2);
  clock_.Advance(absl::Seconds(4));
  jobs_->Tick();
  ASSERT_EQ(Current(id).state(), v1::JOB_STATE_RUNNING);
  jobs_->OnStepSummary(Summary(Current(id), 0, 10, 1, 1));
  MakeManager();
  EXPECT_EQ(Current(id).failures_before_a_step(), 0);
  // That it stepped is stored too: its failure after the restart starts no count.
  Reconnect(Returning("n1", 2, Current(id), {0, 1}));
  const int64_t stepped = Current(id).generation();
  jobs_->OnWorkerState("n1", Exit(Current(id), 0, 1));
  EXPECT_EQ(Current(id).generation(), stepped + 1);
  EXPECT_EQ(Current(id).failures_before_a_step(), 0);
}

TEST_F(JobManagerTest, FatalExitCodeFailsWithoutRestart) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 0, kExitFatal));
  v1::JobStatus failed = Current(job->job_id());
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(failed.restarts(), 0);
}

// A job that failed for good is exported with its failure time for an hour
// (RingmasterJobFailed fires on it), across a coordinator restart too; a cancelled one is not.
TEST_F(JobManagerTest, AFailedJobIsExportedForAnHourAfterItFailed) {
  AddNode("n1", 4);
  auto failed = jobs_->Submit(Spec(), "", alice_);
  auto cancelled = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(failed.ok() && cancelled.ok());
  const std::string series =
      absl::StrCat("ringmaster_job_failed_timestamp_seconds{job_id=\"", failed->job_id(), "\"}");
  EXPECT_TRUE(std::isnan(SeriesValue(registry_.RenderText(), series)));
  jobs_->OnWorkerState("n1", Exit(Current(failed->job_id()), 0, kExitFatal));
  ASSERT_EQ(Current(failed->job_id()).state(), v1::JOB_STATE_FAILED);
  const double failed_at = absl::ToDoubleSeconds(clock_.Now() - absl::UnixEpoch());
  EXPECT_EQ(SeriesValue(registry_.RenderText(), series), failed_at);
  ASSERT_TRUE(jobs_->Cancel(cancelled->job_id(), "", alice_).ok());
  EXPECT_THAT(registry_.RenderText(), Not(HasSubstr(cancelled->job_id())));

  clock_.Advance(absl::Minutes(59));
  // A coordinator restart: a new process starts with no series (this test's managers share one
  // registry), and the new manager exports it again, and ends it.
  registry_.AddGauge("ringmaster_job_failed_timestamp_seconds", "", {"job_id"})
      .Remove({failed->job_id()});
  MakeManager();
  jobs_->Tick();
  EXPECT_EQ(SeriesValue(registry_.RenderText(), series), failed_at);
  clock_.Advance(absl::Minutes(1));
  jobs_->Tick();
  EXPECT_THAT(registry_.RenderText(), Not(HasSubstr(failed->job_id())));
  MakeManager();  // past the hour: not exported again
  EXPECT_THAT(registry_.RenderText(), Not(HasSubstr(failed->job_id())));
}

TEST_F(JobManagerTest, LostNodeRestartsTheJobElsewhere) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(Current(job->job_id()).assignments(0).node(), "n1");
  ASSERT_TRUE(nodes_->Register(Node("n2", 2)).ok());
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(nodes_->Register(Node("n2", 2)).ok());  // n2 fresh, n1 silent.
  clock_.Advance(absl::Seconds(2));
  for (const std::string& lost : nodes_->CheckLiveness()) jobs_->OnNodeLost(lost);
  v1::JobStatus moved = Current(job->job_id());
  EXPECT_EQ(moved.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(moved.generation(), 2);
  EXPECT_EQ(moved.assignments(0).node(), "n2");
}

TEST_F(JobManagerTest, CancelOnlyByOwnerOrAdminAndStopsWorkers) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(jobs_->Cancel(job->job_id(), "", Caller{"mallory", false}).status().code(),
            absl::StatusCode::kPermissionDenied);
  auto cancelled = jobs_->Cancel(job->job_id(), "enough", Caller{"root", true});
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
  ASSERT_EQ(sink_.Stops().size(), 1u);
  EXPECT_EQ(sink_.Stops()[0].first, "n1");
  EXPECT_TRUE(jobs_->Cancel(job->job_id(), "", alice_).ok());  // Idempotent.
  EXPECT_EQ(jobs_->Cancel("nope", "", alice_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, PendingJobRunsWhenAnotherFinishes) {
  AddNode("n1", 2);
  auto first = jobs_->Submit(Spec(), "", alice_);
  auto second = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(Current(second->job_id()).state(), v1::JOB_STATE_PENDING);
  ASSERT_TRUE(jobs_->Cancel(first->job_id(), "", alice_).ok());
  EXPECT_EQ(Current(second->job_id()).state(), v1::JOB_STATE_RUNNING);
}

TEST_F(JobManagerTest, WatchGetsHistoryThenLiveEventsAndProgress) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  std::vector<v1::WatchJobResponse> updates;
  auto watch =
      jobs_->Watch(job->job_id(), 0, [&](const v1::WatchJobResponse& u) { updates.push_back(u); });
  ASSERT_TRUE(watch.ok());
  ASSERT_GE(updates.size(), 2u);  // PENDING and RUNNING events, then a progress snapshot.
  EXPECT_EQ(updates[0].event().sequence(), 1);
  EXPECT_EQ(updates[1].event().state(), v1::JOB_STATE_RUNNING);
  updates.clear();

  v1::JobStatus running = Current(job->job_id());
  for (int rank = 0; rank < 2; ++rank) {
    v1::StepSummary s;
    s.mutable_job()->set_job_id(job->job_id());
    s.mutable_job()->set_generation(1);
    s.set_rank(rank);
    s.set_step(5 + rank);
    s.set_loss(3.5);
    s.set_tokens_per_second(100);
    jobs_->OnStepSummary(s);
  }
  clock_.Advance(absl::Seconds(1));
  jobs_->Tick();
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].progress().step(), 5);  // The slowest rank.
  EXPECT_EQ(updates[0].progress().loss(), 3.5);
  EXPECT_EQ(updates[0].progress().tokens_per_second(), 200);  // Two DP replicas.

  jobs_->OnWorkerState("n1", Exit(running, 0, 0));
  jobs_->OnWorkerState("n1", Exit(running, 1, 0));
  ASSERT_EQ(updates.size(), 2u);
  EXPECT_EQ(updates[1].state(), v1::JOB_STATE_SUCCEEDED);
  jobs_->Unwatch(*watch);
}

TEST_F(JobManagerTest, RecoveryKeepsJobsAndAdoptsWorkersOfTheCurrentGeneration) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  auto pending = jobs_->Submit(Spec(4, 4), "", alice_);
  ASSERT_TRUE(job.ok() && pending.ok());
  v1::JobStatus before = Current(job->job_id());
  auto events_before = jobs_->Get(job->job_id())->events_size();

  // "Restart" the coordinator: new managers over the same store.
  sink_.sent.clear();
  MakeManager();
  v1::JobStatus after = Current(job->job_id());
  EXPECT_EQ(after.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(after.generation(), before.generation());
  EXPECT_EQ(jobs_->Get(job->job_id())->events_size(), events_before);
  EXPECT_EQ(Current(pending->job_id()).state(), v1::JOB_STATE_PENDING);

  // n1 comes back reporting both ranks of the current generation and a stray worker.
  v1::Register again = Returning("n1", 2, before, {0, 1});
  v1::WorkerState* stray = again.add_running_workers();
  stray->mutable_job()->set_job_id("old-job");
  stray->mutable_job()->set_generation(3);
  Reconnect(again);
  auto stops = sink_.Stops();
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].second.job().job_id(), "old-job");
  EXPECT_TRUE(sink_.Launches().empty());
  clock_.Advance(absl::Seconds(11));
  jobs_->Tick();
  EXPECT_EQ(Current(job->job_id()).generation(), before.generation());  // Adopted, not failed.
}

TEST_F(JobManagerTest, RanksThatFinishedBeforeACoordinatorRestartStayFinished) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus running = Current(job->job_id());
  jobs_->OnWorkerState("n1", Exit(running, 0, 0));
  MakeManager();

  // n1 comes back with rank 1 still running and rank 0's exit among those it reported.
  Reconnect(Returning("n1", 2, running, {1}, {Exit(running, 0, 0)}));
  clock_.Advance(absl::Seconds(11));
  jobs_->Tick();
  EXPECT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_RUNNING);  // n1 is accounted for.
  jobs_->OnWorkerState("n1", Exit(running, 1, 0));
  EXPECT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Current(job->job_id()).generation(), running.generation());
  EXPECT_EQ(Current(job->job_id()).restarts(), 0);
}

TEST_F(JobManagerTest, AFailureListedAtRegistrationRestartsTheJobOnce) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus running = Current(job->job_id());
  MakeManager();
  // Rank 1 died while the coordinator was away; the exit is listed, then sent again.
  Reconnect(Returning("n1", 2, running, {0}, {Exit(running, 1, 0, /*signal=*/9)}));
  EXPECT_EQ(Current(job->job_id()).generation(), running.generation() + 1);
  jobs_->OnWorkerState("n1", Exit(running, 1, 0, /*signal=*/9));  // stale now
  const v1::JobStatus after = Current(job->job_id());
  EXPECT_EQ(after.generation(), running.generation() + 1);
  EXPECT_EQ(after.restarts(), 1);
}

// Rank 1 was stopped; rank 0, blocked in a collective with it, was reported hung to a coordinator
// that restarted before acting, and its agent reports the hang again on the new stream. The new
// coordinator never heard from rank 1: it must still blame rank 1, not the reported rank 0.
TEST_F(JobManagerTest, AHangReportedAgainAfterARestartBlamesTheRankThatStaysSilent) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus running = Current(job->job_id());
  MakeManager();
  Reconnect(Returning("n1", 2, running, {0, 1}));
  jobs_->OnStepSummary(Summary(running, 0, 5, 6, 5));  // rank 0's side thread still reports
  jobs_->OnWorkerState("n1", HangReport(running, 0, 40));
  EXPECT_EQ(Current(job->job_id()).generation(), running.generation());  // held for evidence
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Seconds(1));
    jobs_->OnStepSummary(Summary(running, 0, 5, 6, 5));
    jobs_->Tick();
  }
  const auto after = jobs_->Get(job->job_id());
  EXPECT_EQ(after->job().generation(), running.generation() + 1);
  const std::vector<v1::JobEvent> hangs = EventsOf(*after, "hang");
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_THAT(hangs[0].ranks(), ::testing::ElementsAre(1)) << hangs[0].message();
}

// A job submitted while a restarted coordinator waits for its nodes does not get the devices of
// a recovered job's workers when their node registers: they are adopted first.
TEST_F(JobManagerTest, ANodeThatRegistersAgainKeepsItsRecoveredWorkersDevices) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus running = Current(job->job_id());
  MakeManager();
  auto waiting = jobs_->Submit(Spec(), "", alice_);  // no node yet: pending
  ASSERT_TRUE(waiting.ok());
  sink_.sent.clear();
  Reconnect(Returning("n1", 2, running, {0, 1}));
  EXPECT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Current(job->job_id()).generation(), running.generation());
  EXPECT_EQ(Current(waiting->job_id()).state(), v1::JOB_STATE_PENDING);
  EXPECT_TRUE(sink_.Stops().empty());
  EXPECT_TRUE(sink_.Launches().empty());
  // An invalid registration is refused, naming the field, and reconciles nothing.
  auto refused = jobs_->RegisterNode(Node("", 2), [](uint64_t) { ADD_FAILURE() << "registered"; });
  EXPECT_THAT(refused.status().message(), HasSubstr("register.node"));
}

TEST_F(JobManagerTest, ARecoveredNodeMissingOneOfItsRanksRestartsTheJobAtOnce) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus running = Current(job->job_id());
  MakeManager();
  // n1 runs rank 0 only: rank 1 neither runs nor exited there (its agent restarted, say).
  Reconnect(Returning("n1", 2, running, {0}));
  EXPECT_EQ(Current(job->job_id()).generation(), running.generation() + 1);
  const auto after = jobs_->Get(job->job_id());
  ASSERT_TRUE(after.ok());
  std::string events;
  for (const v1::JobEvent& e : after->events()) absl::StrAppend(&events, e.message(), "\n");
  EXPECT_THAT(events, HasSubstr("node n1 registered without rank(s) 1 of generation 1 (its agent "
                                "restarted, or the launch never reached it)"));
}

// The same without a coordinator restart: an agent that restarted before its node was declared
// lost (its workers died with it), or that reconnected after the launch was sent on its broken
// stream, registers without the ranks. The job restarts at once instead of waiting for ever.
// Ranks whose launch the agent still has queued count as there (phase STARTING).
TEST_F(JobManagerTest, ANodeThatRegistersAgainWithoutItsRanksRestartsTheJob) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus gen1 = Current(job->job_id());
  v1::Register starting = Returning("n1", 2, gen1, {0, 1});
  for (v1::WorkerState& w : *starting.mutable_running_workers()) {
    w.set_phase(v1::WORKER_PHASE_STARTING);
  }
  Reconnect(starting);
  EXPECT_EQ(Current(job->job_id()).generation(), 1);  // both still to start: nothing lost
  // One finished, then the agent restarts and forgets it: still finished, not gone.
  jobs_->OnWorkerState("n1", Exit(gen1, 0, 0));
  Reconnect(Returning("n1", 2, gen1, {1}));
  EXPECT_EQ(Current(job->job_id()).generation(), 1);
  Reconnect(Returning("n1", 2, gen1, {}));
  const v1::JobStatus gen2 = Current(job->job_id());
  EXPECT_EQ(gen2.generation(), 2);
  EXPECT_EQ(gen2.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(gen2.restarts(), 1);
}

TEST_F(JobManagerTest, RecoveredJobWhoseNodeNeverReturnsIsRestarted) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  MakeManager();
  clock_.Advance(absl::Seconds(11));
  jobs_->Tick();
  auto after = jobs_->Get(job->job_id());
  EXPECT_EQ(after->job().state(), v1::JOB_STATE_RESTARTING);
  // No node is left to run it: it waits, and its events say why it restarted.
  EXPECT_NE(after->job().reason().find("needs 1 node"), std::string::npos);
  EXPECT_NE(after->events().rbegin()->message().find("did not report"), std::string::npos)
      << after->events().rbegin()->message();
}

v1::UpdateNodeRequest NodeUpdate(const std::string& node, v1::NodeAction action,
                                 const std::string& reason = "") {
  v1::UpdateNodeRequest r;
  r.set_node(node);
  r.set_action(action);
  r.set_reason(reason);
  return r;
}

TEST_F(JobManagerTest, ACrashLoopsWaitThatEndsWithoutCapacityNamesNoNextLaunch) {
  const std::string id = SubmitOnOneNode(absl::Seconds(2));
  ASSERT_FALSE(id.empty());
  jobs_->OnWorkerState("n1", Exit(Current(id), 0, 1));  // relaunched at once
  jobs_->OnWorkerState("n1", Exit(Current(id), 0, 1));  // waits 2 s
  ASSERT_GT(Current(id).backoff_until_unix_nanos(), 0);
  const Caller admin{"root", true};
  ASSERT_TRUE(jobs_->UpdateNode(NodeUpdate("n1", v1::NODE_ACTION_CORDON), admin).ok());
  clock_.Advance(absl::Seconds(3));
  jobs_->Tick();
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);  // nowhere to go
  EXPECT_EQ(Current(id).backoff_until_unix_nanos(), 0);      // but no longer backing off
}

TEST_F(JobManagerTest, CordonedNodeGetsNoPlacementUntilUncordoned) {
  const Caller admin{"root", true};
  AddNode("a", 2);
  AddNode("b", 2);
  auto cordoned = jobs_->UpdateNode(NodeUpdate("a", v1::NODE_ACTION_CORDON, "ECC errors"), admin);
  ASSERT_TRUE(cordoned.ok()) << cordoned.status();
  EXPECT_EQ(cordoned->node().cordon().reason(), "ECC errors");
  EXPECT_EQ(cordoned->node().cordon().by(), "root");
  EXPECT_TRUE(cordoned->moved_jobs().empty());

  auto first = jobs_->Submit(Spec(), "", alice_);
  auto second = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(first.ok() && second.ok());
  v1::JobStatus running = Current(first->job_id());
  ASSERT_EQ(running.state(), v1::JOB_STATE_RUNNING);
  for (const auto& a : running.assignments()) EXPECT_EQ(a.node(), "b");
  v1::JobStatus waiting = Current(second->job_id());
  EXPECT_EQ(waiting.state(), v1::JOB_STATE_PENDING);
  EXPECT_NE(waiting.reason().find("cordoned: a"), std::string::npos) << waiting.reason();

  // Cordoning again keeps when it began and, without a new reason, the old one.
  auto again = jobs_->UpdateNode(NodeUpdate("a", v1::NODE_ACTION_CORDON), admin);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->node().cordon().reason(), "ECC errors");
  EXPECT_EQ(again->node().cordon().since_unix_nanos(),
            cordoned->node().cordon().since_unix_nanos());

  auto uncordoned = jobs_->UpdateNode(NodeUpdate("a", v1::NODE_ACTION_UNCORDON), admin);
  ASSERT_TRUE(uncordoned.ok()) << uncordoned.status();
  EXPECT_FALSE(uncordoned->node().has_cordon());
  waiting = Current(second->job_id());
  ASSERT_EQ(waiting.state(), v1::JOB_STATE_RUNNING);
  for (const auto& a : waiting.assignments()) EXPECT_EQ(a.node(), "a");
}

TEST_F(JobManagerTest, DrainMovesRunningJobsElsewhereWithoutUsingARestart) {
  const Caller anonymous;  // authentication off: every caller may change nodes
  ASSERT_NO_FATAL_FAILURE(RunOnOneOfTwoNodes());
  const std::string id = two_.id, from = two_.from, to = two_.to;
  const v1::JobStatus first = two_.first;

  auto drained =
      jobs_->UpdateNode(NodeUpdate(from, v1::NODE_ACTION_DRAIN, "kernel upgrade"), anonymous);
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_EQ(std::vector<std::string>(drained->moved_jobs().begin(), drained->moved_jobs().end()),
            std::vector<std::string>{id});
  EXPECT_TRUE(drained->node().has_cordon());
  // The workers are asked to checkpoint and exit; the next generation waits for their exits.
  v1::JobStatus moved = Current(id);
  EXPECT_EQ(moved.state(), v1::JOB_STATE_RESTARTING);
  EXPECT_THAT(moved.reason(), HasSubstr("for 2 rank(s) of generation 1 to checkpoint and exit"));
  EXPECT_TRUE(sink_.Launches().empty());
  ASSERT_EQ(sink_.Stops().size(), 1u);
  EXPECT_EQ(sink_.Stops()[0].second.checkpoint_grace_seconds(), 120);
  jobs_->OnWorkerState(from, Exit(first, 0, 75));
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);  // rank 1 is still checkpointing
  jobs_->OnWorkerState(from, Exit(first, 1, 75));
  moved = Current(id);
  EXPECT_EQ(moved.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(moved.generation(), 2);
  EXPECT_EQ(moved.restarts(), 0);
  for (const auto& a : moved.assignments()) EXPECT_EQ(a.node(), to);
  auto stops = sink_.Stops();
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].first, from);
  EXPECT_EQ(stops[0].second.job().generation(), 1);
  std::vector<v1::JobEvent> drains = EventsOf(*jobs_->Get(id), "drain");
  ASSERT_EQ(drains.size(), 1u);
  EXPECT_NE(drains[0].message().find("kernel upgrade"), std::string::npos);
  EXPECT_EQ(drains[0].ranks_size(), 2);
  EXPECT_EQ(StatesOf(*jobs_->Get(id)),
            (std::vector<v1::JobState>{v1::JOB_STATE_PENDING, v1::JOB_STATE_RUNNING,
                                       v1::JOB_STATE_RESTARTING, v1::JOB_STATE_RUNNING}));
  std::string page = registry_.RenderText();
  EXPECT_NE(page.find("ringmaster_node_cordoned{node=\"" + from + "\"} 1"), std::string::npos)
      << page;

  EXPECT_EQ(EventsOf(*jobs_->Get(id), "stopped").size(), 1u);

  // Draining the other node too leaves nowhere to go: the job waits, saying why.
  ASSERT_TRUE(jobs_->UpdateNode(NodeUpdate(to, v1::NODE_ACTION_DRAIN), anonymous).ok());
  for (int rank = 0; rank < 2; ++rank) jobs_->OnWorkerState(to, Exit(moved, rank, 75));
  moved = Current(id);
  EXPECT_EQ(moved.state(), v1::JOB_STATE_RESTARTING);
  EXPECT_NE(moved.reason().find("cordoned: a, b"), std::string::npos) << moved.reason();
  ASSERT_TRUE(jobs_->UpdateNode(NodeUpdate(from, v1::NODE_ACTION_UNCORDON), anonymous).ok());
  moved = Current(id);
  EXPECT_EQ(moved.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(moved.generation(), 3);
  EXPECT_EQ(moved.restarts(), 0);  // max_restarts is 1: two moves used none of it
}

TEST_F(JobManagerTest, AJobThatFinishesWhileItsDrainWaitsSucceeds) {
  ASSERT_NO_FATAL_FAILURE(RunOnOneOfTwoNodes());
  // Rank 0 finished its last step just before the drain; rank 1 finishes while asked to stop.
  jobs_->OnWorkerState(two_.from, Exit(two_.first, 0, 0));
  ASSERT_TRUE(jobs_->UpdateNode(NodeUpdate(two_.from, v1::NODE_ACTION_DRAIN), Caller{}).ok());
  EXPECT_EQ(Current(two_.id).state(), v1::JOB_STATE_RESTARTING);
  // A rank the job does not have, or the other node's word about rank 1, finishes nothing.
  jobs_->OnWorkerState(two_.from, Exit(two_.first, 5, 0));
  jobs_->OnWorkerState(two_.to, Exit(two_.first, 1, 0));
  EXPECT_EQ(Current(two_.id).state(), v1::JOB_STATE_RESTARTING);
  jobs_->OnWorkerState(two_.from, Exit(two_.first, 1, 0));
  const v1::JobStatus done = Current(two_.id);
  EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(done.generation(), 1);
  EXPECT_TRUE(sink_.Launches().empty());
}

TEST_F(JobManagerTest, ADrainLaunchesWithoutTheExitsOnceTheGracesHavePassed) {
  for (const char* node : {"a", "b", "c", "d"}) AddNode(node, 1);
  for (const char* node : {"c", "d"}) {
    ASSERT_TRUE(jobs_->UpdateNode(NodeUpdate(node, v1::NODE_ACTION_CORDON), Caller{}).ok());
  }
  auto job = jobs_->Submit(Spec(2, 1), "", alice_);
  ASSERT_TRUE(job.ok());
  const std::string id = job->job_id();
  const v1::JobStatus first = Current(id);
  ASSERT_EQ(first.state(), v1::JOB_STATE_RUNNING);
  for (const char* node : {"c", "d"}) {
    ASSERT_TRUE(jobs_->UpdateNode(NodeUpdate(node, v1::NODE_ACTION_UNCORDON), Caller{}).ok());
  }
  ASSERT_TRUE(jobs_->UpdateNode(NodeUpdate("a", v1::NODE_ACTION_DRAIN), Caller{}).ok());
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  // An exit of an older generation changes nothing.
  v1::WorkerState stale = Exit(first, 0, 75);
  stale.mutable_job()->set_generation(0);
  jobs_->OnWorkerState("a", stale);
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  // Node b is lost, so its rank will not report; a's rank never does either. The job launches
  // once the checkpoint grace (120 s), the stop grace (10 s) and 5 s have passed.
  const auto refresh = [&] {  // a, c and d stay alive
    for (const char* node : {"a", "c", "d"}) ASSERT_TRUE(nodes_->Register(Node(node, 1)).ok());
  };
  clock_.Advance(absl::Seconds(2));
  refresh();
  clock_.Advance(absl::Seconds(2));
  ASSERT_EQ(nodes_->CheckLiveness(), std::vector<std::string>{"b"});
  jobs_->OnNodeLost("b");
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  clock_.Advance(absl::Seconds(130));
  refresh();
  jobs_->Tick();
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  clock_.Advance(absl::Seconds(2));
  jobs_->Tick();
  const v1::JobStatus second = Current(id);
  EXPECT_EQ(second.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(second.generation(), 2);
  EXPECT_EQ(second.restarts(), 0);
  for (const auto& a : second.assignments()) EXPECT_TRUE(a.node() == "c" || a.node() == "d");
  EXPECT_TRUE(EventsOf(*jobs_->Get(id), "stopped").empty());
  // A late exit of generation 1 is fenced: generation 2 runs on.
  const int on_a = first.assignments(0).node() == "a" ? 0 : 1;
  jobs_->OnWorkerState("a", Exit(first, on_a, 75));
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Current(id).generation(), 2);
}

// The device of a drained rank that is still checkpointing stays held until the rank exits, so
// nothing else is placed on it meanwhile.
TEST_F(JobManagerTest, ADrainedRanksDeviceIsHeldUntilItExits) {
  AddNode("a", 2);
  AddNode("b", 2);
  auto drained = jobs_->Submit(Spec(2, 1), "", alice_);
  ASSERT_TRUE(drained.ok());
  const v1::JobStatus first = Current(drained->job_id());
  ASSERT_EQ(first.state(), v1::JOB_STATE_RUNNING);
  const int on_b = first.assignments(0).node() == "b" ? 0 : 1;
  const int held = first.assignments(on_b).local_device();
  ASSERT_TRUE(jobs_->UpdateNode(NodeUpdate("a", v1::NODE_ACTION_DRAIN), Caller{}).ok());
  ASSERT_EQ(Current(first.job_id()).state(), v1::JOB_STATE_RESTARTING);

  auto other = jobs_->Submit(Spec(1, 1), "", alice_);
  ASSERT_TRUE(other.ok());
  const v1::JobStatus placed = Current(other->job_id());
  ASSERT_EQ(placed.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(placed.assignments(0).node(), "b");
  EXPECT_NE(placed.assignments(0).local_device(), held);
  ASSERT_TRUE(jobs_->Cancel(other->job_id(), "", alice_).ok());
  ASSERT_EQ(nodes_->FreeCapacity().size(), 1u);  // b; a is cordoned
  EXPECT_EQ(nodes_->FreeCapacity()[0].free.size(), 1u);

  jobs_->OnWorkerState("b", Exit(first, on_b, 75));
  EXPECT_EQ(Current(first.job_id()).state(), v1::JOB_STATE_RESTARTING);  // a's rank still stops
  EXPECT_EQ(nodes_->FreeCapacity()[0].free.size(), 2u);
}

// A job cancelled while its drain waits for its ranks' checkpoints ends at once, but its ranks
// still checkpointing keep their devices until each exits (nothing else is placed on a GPU
// still in use), or until the wait's deadline.
TEST_F(JobManagerTest, ACancelDuringADrainsWaitHoldsTheCheckpointingRanksDevices) {
  AddNode("a", 2);
  AddNode("b", 2);
  auto drained = jobs_->Submit(Spec(2, 1), "", alice_);
  ASSERT_TRUE(drained.ok());
  const std::string id = drained->job_id();
  const v1::JobStatus first = Current(id);
  const int on_b = first.assignments(0).node() == "b" ? 0 : 1;
  ASSERT_TRUE(jobs_->UpdateNode(NodeUpdate("a", v1::NODE_ACTION_DRAIN), Caller{}).ok());
  ASSERT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  sink_.sent.clear();

  ASSERT_TRUE(jobs_->Cancel(id, "", alice_).ok());
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(Current(id).stopping_ranks_size(), 2);
  // The coordinator restarts meanwhile; b comes back with its rank still checkpointing, which is
  // not told to stop again and keeps its device.
  MakeManager();
  Reconnect(Returning("b", 2, first, {on_b}));
  EXPECT_TRUE(sink_.Stops().empty());
  ASSERT_EQ(nodes_->FreeCapacity().size(), 1u);  // b; a is cordoned, and not back yet
  EXPECT_EQ(nodes_->FreeCapacity()[0].free.size(), 1u);
  auto other = jobs_->Submit(Spec(1, 2), "", alice_);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(Current(other->job_id()).state(), v1::JOB_STATE_PENDING);

  // b's rank exits after its checkpoint: its device is free, and the other job runs there.
  jobs_->OnWorkerState("b", Exit(first, on_b, 75));
  EXPECT_EQ(Current(other->job_id()).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Current(id).stopping_ranks_size(), 1);
  // a's rank never reports: at the deadline it has been SIGKILLed and the wait ends, without a
  // launch.
  clock_.Advance(absl::Minutes(10));
  jobs_->Tick();
  const v1::JobStatus ended = Current(id);
  EXPECT_EQ(ended.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(ended.stopping_ranks_size(), 0);
  EXPECT_EQ(ended.generation(), first.generation());
  for (const v1::LaunchWorkers& launch : sink_.Launches()) EXPECT_NE(launch.job().job_id(), id);
}

// A coordinator restart during a drain's wait goes on waiting: the ranks still checkpointing are
// stored with the job, are not told to stop again when their node registers, and the next
// generation launches only once they have exited. A rank that exited while the coordinator was
// away counts as gone when its node registers without it.
TEST_F(JobManagerTest, ADrainsWaitGoesOnAfterACoordinatorRestart) {
  ASSERT_NO_FATAL_FAILURE(RunOnOneOfTwoNodes());
  const std::string id = two_.id, from = two_.from, to = two_.to;
  ASSERT_TRUE(jobs_->UpdateNode(NodeUpdate(from, v1::NODE_ACTION_DRAIN), Caller{}).ok());
  EXPECT_THAT(Current(id).stopping_ranks(), ElementsAre(0, 1));

  // Restarted; `to` registers first: nothing is launched while the ranks checkpoint.
  MakeManager();
  sink_.sent.clear();
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  AddNode(to, 2);
  EXPECT_TRUE(sink_.Launches().empty());
  // `from` registers still running rank 1 (rank 0 exited meanwhile): rank 1 is not stopped again.
  Reconnect(Returning(from, 2, two_.first, {1}));
  EXPECT_TRUE(sink_.Stops().empty());
  EXPECT_TRUE(sink_.Launches().empty());
  v1::JobStatus waiting = Current(id);
  EXPECT_EQ(waiting.state(), v1::JOB_STATE_RESTARTING);
  EXPECT_THAT(waiting.stopping_ranks(), ElementsAre(1));

  jobs_->OnWorkerState(from, Exit(two_.first, 1, 75));
  const v1::JobStatus moved = Current(id);
  EXPECT_EQ(moved.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(moved.generation(), 2);
  EXPECT_EQ(moved.restarts(), 0);
  EXPECT_TRUE(moved.stopping_ranks().empty());
  for (const auto& a : moved.assignments()) EXPECT_EQ(a.node(), to);
  EXPECT_EQ(EventsOf(*jobs_->Get(id), "stopped").size(), 1u);
}

TEST_F(JobManagerTest, ALeavingNodesJobsMoveLikeADrainWithinTheAgentsGrace) {
  ASSERT_NO_FATAL_FAILURE(RunOnOneOfTwoNodes());
  const std::string id = two_.id, from = two_.from, to = two_.to;
  const v1::JobStatus first = two_.first;
  v1::Leaving leaving;
  leaving.set_checkpoint_grace_seconds(30);
  leaving.set_reason("signal 15");
  nodes_->SetLeaving(from);  // as the agent service does first
  jobs_->OnNodeLeaving(from, leaving);
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  auto stops = sink_.Stops();
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].second.checkpoint_grace_seconds(), 30);
  std::vector<v1::JobEvent> drains = EventsOf(*jobs_->Get(id), "drain");
  ASSERT_EQ(drains.size(), 1u);
  EXPECT_EQ(drains[0].message(), "node " + from + " is shutting down (signal 15)");
  for (int rank = 0; rank < 2; ++rank) jobs_->OnWorkerState(from, Exit(first, rank, 75));
  const v1::JobStatus moved = Current(id);
  EXPECT_EQ(moved.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(moved.restarts(), 0);
  for (const auto& a : moved.assignments()) EXPECT_EQ(a.node(), to);
  EXPECT_TRUE(nodes_->Cordoned().empty());  // not a cordon: gone once the agent registers again
}

TEST_F(JobManagerTest, NodeUpdatesAreRefusedNamingTheRule) {
  const Caller admin{"root", true};
  AddNode("a", 1);
  auto refused = jobs_->UpdateNode(NodeUpdate("a", v1::NODE_ACTION_CORDON), alice_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("admin"), std::string::npos);
  auto empty = jobs_->UpdateNode(NodeUpdate("", v1::NODE_ACTION_CORDON), admin);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("node"), std::string::npos);
  auto no_action = jobs_->UpdateNode(NodeUpdate("a", v1::NODE_ACTION_UNSPECIFIED), admin);
  EXPECT_EQ(no_action.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_action.status().message().find("action"), std::string::npos);
  auto long_reason =
      jobs_->UpdateNode(NodeUpdate("a", v1::NODE_ACTION_CORDON, std::string(1025, 'x')), admin);
  EXPECT_EQ(long_reason.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(long_reason.status().message().find("reason"), std::string::npos);
  auto unknown = jobs_->UpdateNode(NodeUpdate("typo", v1::NODE_ACTION_DRAIN), admin);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("typo"), std::string::npos);
  // Nothing was cordoned by any of them.
  EXPECT_TRUE(nodes_->Cordoned().empty());
  EXPECT_TRUE(store_->LoadCordons()->empty());
}

TEST_F(JobManagerTest, CordonsSurviveACoordinatorRestart) {
  const Caller admin{"root", true};
  AddNode("a", 2);
  AddNode("b", 2);
  ASSERT_TRUE(jobs_->UpdateNode(NodeUpdate("a", v1::NODE_ACTION_CORDON, "bad fan"), admin).ok());
  MakeManager();  // new managers over the same store; no node has registered again yet
  ASSERT_EQ(nodes_->Cordoned(), std::vector<std::string>{"a"});
  EXPECT_EQ(nodes_->CordonOf("a")->reason(), "bad fan");
  AddNode("a", 2);
  AddNode("b", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus placed = Current(job->job_id());
  ASSERT_EQ(placed.state(), v1::JOB_STATE_RUNNING);
  for (const auto& a : placed.assignments()) EXPECT_EQ(a.node(), "b");
  // A forgotten-but-cordoned node can still be uncordoned, and that is stored too.
  ASSERT_TRUE(jobs_->UpdateNode(NodeUpdate("a", v1::NODE_ACTION_UNCORDON), admin).ok());
  MakeManager();
  EXPECT_TRUE(nodes_->Cordoned().empty());
}

TEST_F(JobManagerTest, RelaunchedRecoveredJobIsNotFailedForTheNodeItLeft) {
  AddNode("a", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  MakeManager();  // a coordinator restart: the running job waits for node a to report it
  AddNode("b", 2);
  // Node a is drained before it comes back: the job moves to b in generation 2.
  auto drained = jobs_->UpdateNode(NodeUpdate("a", v1::NODE_ACTION_DRAIN), Caller{});
  ASSERT_TRUE(drained.ok()) << drained.status();
  ASSERT_EQ(Current(job->job_id()).generation(), 2);
  // Generation 2 has nothing to reconcile: the reconcile timeout passes without a failure.
  clock_.Advance(absl::Seconds(11));
  jobs_->Tick();
  const v1::JobStatus after = Current(job->job_id());
  EXPECT_EQ(after.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(after.generation(), 2);
  EXPECT_EQ(after.restarts(), 0);
}

}  // namespace
}  // namespace ringmaster::coordinator
