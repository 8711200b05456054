// The fixture and helpers the JobManager tests share (job_manager_test.cc,
// job_manager_records_test.cc, job_manager_scheduling_test.cc, job_manager_watchdog_test.cc,
// job_manager_checkpoints_test.cc, job_manager_recovery_test.cc): a JobManager over a real JobStore
// in the test's temporary directory, a fake clock and a sink that records what would go to agents,
// and builders of the specs, registrations and reports the tests feed it.
#ifndef RINGMASTER_COORDINATOR_JOB_MANAGER_TEST_FIXTURE_H_
#define RINGMASTER_COORDINATOR_JOB_MANAGER_TEST_FIXTURE_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/metrics/registry.h"
#include "common/testing/series_value.h"
#include "common/testing/subprocess.h"
#include "coordinator/agent_command_sink.h"
#include "coordinator/caller.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_store.h"
#include "coordinator/node_manager.h"
#include "coordinator/rendezvous_manager.h"
#include "coordinator/testing/fault_injecting_job_store.h"
#include "coordinator/testing/node_registration.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {

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

inline v1::JobSpec Spec(int nodes = 1, int devices_per_node = 2) {
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

inline v1::JobGeneration Generation(const v1::JobStatus& job) {
  v1::JobGeneration g;
  g.set_job_id(job.job_id());
  g.set_generation(job.generation());
  return g;
}

inline v1::WorkerState Exit(const v1::JobStatus& job, int rank, int code, int signal = 0) {
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
inline v1::Register Returning(const std::string& name, int devices, const v1::JobStatus& job,
                              const std::vector<int>& running,
                              const std::vector<v1::WorkerState>& exits = {}) {
  v1::Register r = NodeRegistration(name, devices);
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
inline v1::WorkerState HangReport(const v1::JobStatus& job, int rank, double age) {
  v1::WorkerState s = Exit(job, rank, 0);
  s.set_phase(v1::WORKER_PHASE_STEP);
  s.set_last_report_age_seconds(age);
  return s;
}

// A summary of `rank` at `step` with dp0 sequence numbers and `compute` seconds per step.
inline v1::StepSummary Summary(const v1::JobStatus& job, int rank, int64_t step, int64_t entered,
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
// Generation `gen` of a 2-rank job starts: every rank's first summary, at `now`, from
// `start_step`, at step `step`, with `checkpoint` its newest committed checkpoint (-1: none).
inline void StartTwoRanks(JobManager& jobs, absl::Time now, const v1::JobStatus& gen,
                          int64_t start_step, int64_t step, int64_t checkpoint) {
  for (int rank = 0; rank < 2; ++rank) {
    v1::StepSummary s = Summary(gen, rank, step, 1, 1);
    s.set_process_start_unix_nanos(absl::ToUnixNanos(now));
    s.set_start_step(start_step);
    s.set_checkpoint_step(checkpoint);
    jobs.OnStepSummary(s);
  }
}

inline std::vector<v1::JobEvent> EventsOf(const v1::GetJobResponse& r, const std::string& kind) {
  std::vector<v1::JobEvent> out;
  for (const auto& e : r.events()) {
    if (e.kind() == kind) out.push_back(e);
  }
  return out;
}

inline std::vector<v1::JobState> StatesOf(const v1::GetJobResponse& r) {
  std::vector<v1::JobState> states;
  for (const auto& e : r.events()) {
    if (e.kind() == "state") states.push_back(e.state());
  }
  return states;
}

using ::ringmaster::testing::SeriesValue;

inline v1::UpdateNodeRequest NodeUpdate(const std::string& node, v1::NodeAction action,
                                        const std::string& reason = "") {
  v1::UpdateNodeRequest r;
  r.set_node(node);
  r.set_action(action);
  r.set_reason(reason);
  return r;
}

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(testing::TestTempDir(), "/jobs-",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".db");
    auto store = JobStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    auto faults = std::make_unique<FaultInjectingJobStore>(std::move(*store));
    faults_ = faults.get();
    store_ = std::move(faults);
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
    options.events_in_memory = events_in_memory_;
    options.max_store_replay = max_store_replay_;
    options.hold_devices_for_oldest_pending = hold_devices_;
    jobs_ = std::make_unique<JobManager>(store_.get(), nodes_.get(), rendezvous_.get(), &sink_,
                                         &clock_, &registry_, options);
    ASSERT_TRUE(jobs_->Recover().ok());
  }

  void AddNode(const std::string& name, int devices) {
    ASSERT_TRUE(nodes_->Register(NodeRegistration(name, devices)).ok());
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
  size_t events_in_memory_ = 1000;
  size_t max_store_replay_ = 10000;
  bool hold_devices_ = true;
  FakeClock clock_;
  metrics::Registry registry_;
  RecordingSink sink_;
  std::unique_ptr<JobStore> store_;
  FaultInjectingJobStore* faults_ = nullptr;  // store_: the SQLite file, faults when told
  std::unique_ptr<NodeManager> nodes_;
  std::unique_ptr<RendezvousManager> rendezvous_;
  std::unique_ptr<JobManager> jobs_;
  Caller alice_{"alice", false};
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_JOB_MANAGER_TEST_FIXTURE_H_
