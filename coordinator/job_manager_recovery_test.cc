// JobManager across restarts of the coordinator and reconnections of agents (the shared fixture
// is in job_manager_test_fixture.h): recovery from the store, nodes registering again with or
// without their workers, cordon, drain and leaving nodes, and a coordinator that dies at a store
// write (FaultInjectingJobStore's crash) coming back on the file.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_test_fixture.h"
#include "coordinator/spec_validation.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

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

// A builtin job stored before the optimizer defaults (its 0 warmup, decay and clipping absent on
// the wire) keeps its 0s after a coordinator restart; a job submitted since keeps its defaults.
// The trainer applies the defaults again to the spec it is sent: they change nothing.
TEST_F(JobManagerTest, AJobStoredBeforeTheOptimizerDefaultsKeepsItsZeros) {
  AddNode("n1", 2);
  auto old_job = jobs_->Submit(Spec(), "", alice_);
  auto new_job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(old_job.ok() && new_job.ok());
  v1::JobStatus stored = Current(old_job->job_id());
  v1::OptimizerSpec* o = stored.mutable_spec()->mutable_trainer()->mutable_optimizer();
  o->clear_warmup_steps();
  o->clear_weight_decay();
  o->clear_clip_grad_norm();
  ASSERT_TRUE(store_->PutJob(stored).ok());

  MakeManager();
  const v1::JobSpec old_spec = Current(old_job->job_id()).spec();
  const v1::OptimizerSpec& kept = old_spec.trainer().optimizer();
  EXPECT_TRUE(kept.has_warmup_steps() && kept.has_weight_decay() && kept.has_clip_grad_norm());
  EXPECT_EQ(kept.warmup_steps(), 0);
  EXPECT_EQ(kept.weight_decay(), 0);
  EXPECT_EQ(kept.clip_grad_norm(), 0);
  const v1::OptimizerSpec fresh = Current(new_job->job_id()).spec().trainer().optimizer();
  EXPECT_DOUBLE_EQ(fresh.weight_decay(), 0.1);
  EXPECT_DOUBLE_EQ(fresh.clip_grad_norm(), 1.0);
  EXPECT_EQ(fresh.warmup_steps(), 0);  // 5% of 10 steps
  EXPECT_TRUE(fresh.has_warmup_steps());
  // Stored so: a second restart finds the same.
  MakeManager();
  EXPECT_EQ(Current(old_job->job_id()).spec().trainer().optimizer().weight_decay(), 0);

  // What the agent hands the trainer (RINGMASTER_JOB_SPEC_JSON), read back and defaulted again.
  for (const v1::JobSpec& sent : {old_spec, Current(new_job->job_id()).spec()}) {
    std::string json;
    ASSERT_TRUE(google::protobuf::util::MessageToJsonString(sent, &json).ok());
    v1::JobSpec read;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &read).ok());
    ApplyDefaults(&read);
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(read, sent))
        << read.DebugString() << " vs " << sent.DebugString();
  }
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
  auto refused =
      jobs_->RegisterNode(NodeRegistration("", 2), [](uint64_t) { ADD_FAILURE() << "registered"; });
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

// The coordinator's ticker hands on a node whose stream ended, so its agent may register again
// (listing its running workers) before the job manager hears of the loss: that registration
// reconciled the node's ranks, the job runs on in its generation, and the late loss changes
// nothing. Handed on before the registration, the loss restarts the job once.
TEST_F(JobManagerTest, ALossHandedOnAfterTheNodeRegisteredAgainRestartsNothing) {
  const TwoNodeJob job = RunOnTwoNodes();
  // A session of n1 to lose (as n1 registered).
  auto n1 = nodes_->Register(NodeRegistration("n1", 2));
  ASSERT_TRUE(n1.ok());
  ASSERT_TRUE(nodes_->Disconnected("n1", *n1));
  std::vector<int> on_n1;
  for (int rank = 0; rank < 4; ++rank) {
    if (job.node[rank] == "n1") on_n1.push_back(rank);
  }
  Reconnect(Returning("n1", 2, job.running, on_n1));
  for (const std::string& lost : nodes_->TakeDisconnected()) jobs_->OnNodeLost(lost);
  v1::JobStatus now = Current(job.id);
  EXPECT_EQ(now.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(now.generation(), 1);
  EXPECT_EQ(now.restarts(), 0);
  EXPECT_TRUE(sink_.Stops().empty());

  auto n2 = nodes_->Register(NodeRegistration("n2", 2));
  ASSERT_TRUE(n2.ok());
  ASSERT_TRUE(nodes_->Disconnected("n2", *n2));
  for (const std::string& lost : nodes_->TakeDisconnected()) jobs_->OnNodeLost(lost);
  now = Current(job.id);
  EXPECT_EQ(now.restarts(), 1);
  EXPECT_NE(now.state(), v1::JOB_STATE_RUNNING);  // it waits for n2's capacity
  EXPECT_FALSE(sink_.Stops().empty());            // n1's ranks are stopped
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
    for (const char* node : {"a", "c", "d"})
      ASSERT_TRUE(nodes_->Register(NodeRegistration(node, 1)).ok());
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

// The coordinator forgets a Leaving with the stream that carried it: an agent that registers
// anew while leaving (its stream broke; here, a coordinator that restarted and never heard the
// Leaving) says so in its registration. Its running job moves as for the Leaving message, and
// nothing is placed on it, not even by the registration's own placement pass.
TEST_F(JobManagerTest, ARegistrationThatSaysLeavingMovesTheJobAndTakesNothingNew) {
  ASSERT_NO_FATAL_FAILURE(RunOnOneOfTwoNodes());
  const std::string id = two_.id, from = two_.from, to = two_.to;
  const v1::JobStatus first = two_.first;
  MakeManager();  // a coordinator restarted over the same store: the job is adopted as running
  AddNode(to, 2);
  v1::Register leaving = Returning(from, 2, first, {0, 1});
  leaving.mutable_leaving()->set_checkpoint_grace_seconds(30);
  leaving.mutable_leaving()->set_reason("signal 15");
  Reconnect(leaving);
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  std::vector<v1::JobEvent> drains = EventsOf(*jobs_->Get(id), "drain");
  ASSERT_EQ(drains.size(), 1u);
  EXPECT_EQ(drains[0].message(), "node " + from + " is shutting down (signal 15)");
  EXPECT_TRUE(nodes_->Status(from)->leaving());
  for (int rank = 0; rank < 2; ++rank) jobs_->OnWorkerState(from, Exit(first, rank, 75));
  const v1::JobStatus moved = Current(id);
  EXPECT_EQ(moved.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(moved.restarts(), 0);
  for (const auto& a : moved.assignments()) EXPECT_EQ(a.node(), to);
  // A second job would fit only on the leaving node's devices, free now: it waits.
  auto second = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(Current(second->job_id()).state(), v1::JOB_STATE_PENDING);
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

// The coordinator's process dies at a store write (FaultInjectingJobStore's crash: the process is
// taken to die at its first write after it) and a new one starts on the same SQLite file.
class JobManagerCrashTest : public JobManagerTest {
 protected:
  // A new coordinator on the file at `path`, the old one and its store gone first; what was sent
  // to agents so far is cleared.
  void StartOn(const std::string& path) {
    jobs_.reset();
    store_.reset();
    faults_ = nullptr;
    path_ = path;
    auto store = JobStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    auto faults = std::make_unique<FaultInjectingJobStore>(std::move(*store));
    faults_ = faults.get();
    store_ = std::move(faults);
    sink_.sent.clear();
    MakeManager();
  }

  // What a job's life did before the process died (crash_after < 0: it never does): submitted on
  // n1, placed, a rank failing and the job relaunched, then both ranks finishing.
  struct Life {
    bool acknowledged = false;  // Submit answered before the process died
    int64_t launched = 0;       // the newest generation an agent was told to launch by then
    int64_t writes = 0;         // the store writes the life called
  };
  Life Live(int64_t crash_after) {
    Life life;
    if (crash_after >= 0) faults_->CrashAfterWrites(crash_after);
    auto alive = [&] { return crash_after < 0 || faults_->write_attempts() <= crash_after; };
    sink_.on_send = [&](const std::string&, const v1::CoordinatorMessage& m) {
      if (m.has_launch() && alive()) {
        life.launched = std::max(life.launched, m.launch().job().generation());
      }
    };
    AddNode("n1", 2);
    auto job = jobs_->Submit(Spec(), "req", alice_);
    life.acknowledged = job.ok() && alive();
    if (job.ok()) {
      jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 0, 1));  // generation 2
      const v1::JobStatus second = Current(job->job_id());
      jobs_->OnWorkerState("n1", Exit(second, 0, 0));
      jobs_->OnWorkerState("n1", Exit(second, 1, 0));
    }
    sink_.on_send = nullptr;
    life.writes = faults_->write_attempts();
    return life;
  }
};

// Whichever store write the coordinator dies at, through a job's whole life, the coordinator
// that starts on the file answers for what the dead one said: a submission it acknowledged is
// there (and a retry of it gets that job back), the stored generation is at least every one an
// agent was told to launch (each is stored before its launch is sent), and the job's next launch
// takes a newer generation than those (an agent would take a reused one for a stale launch).
TEST_F(JobManagerCrashTest, ACoordinatorDyingAtAnyStoreWriteComesBackWithWhatItAnswered) {
  const std::string base = path_;
  const Life whole = Live(-1);
  ASSERT_GE(whole.writes, 4);  // created, placed, restarting, placed again, ...
  ASSERT_EQ(whole.launched, 2);
  for (int64_t crash_after = 0; crash_after < whole.writes; ++crash_after) {
    SCOPED_TRACE(absl::StrCat("dies at write ", crash_after + 1, " of ", whole.writes));
    const std::string path = absl::StrCat(base, ".crash-", crash_after);
    StartOn(path);
    const Life life = Live(crash_after);
    ASSERT_TRUE(faults_->crashed());
    StartOn(path);  // the new coordinator
    auto recovered = jobs_->List({}, 10);
    ASSERT_TRUE(recovered.ok()) << recovered.status();
    if (life.acknowledged) {
      ASSERT_EQ(recovered->jobs.size(), 1u) << "an acknowledged job is lost";
    }
    if (recovered->jobs.empty()) {
      EXPECT_EQ(life.launched, 0);
      continue;
    }
    const v1::JobStatus back = recovered->jobs[0];
    EXPECT_GE(back.generation(), life.launched);
    Reconnect(NodeRegistration("n1", 2));  // its agent comes back without the job's workers
    for (const v1::LaunchWorkers& launch : sink_.Launches()) {
      EXPECT_GT(launch.job().generation(), life.launched);
    }
    auto again = jobs_->Submit(Spec(), "req", alice_);  // the client retries its submission
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->job_id(), back.job_id());
  }
}

// A job the coordinator had stored but not yet placed when it died runs once its node is back,
// in generation 1: submitted on a cluster with no node, placed only after the restart.
TEST_F(JobManagerCrashTest, AJobStoredButNotPlacedBeforeADeathRunsAfterTheRestart) {
  faults_->CrashAfterWrites(1);
  auto job = jobs_->Submit(Spec(), "", alice_);  // stored PENDING: no node to place it on
  ASSERT_TRUE(job.ok()) << job.status();
  AddNode("n1", 2);  // the placement's write is the one the process dies at
  EXPECT_TRUE(faults_->crashed());
  StartOn(path_);
  EXPECT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_PENDING);
  Reconnect(NodeRegistration("n1", 2));
  const v1::JobStatus running = Current(job->job_id());
  EXPECT_EQ(running.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(running.generation(), 1);
  ASSERT_EQ(sink_.Launches().size(), 1u);
  EXPECT_EQ(sink_.Launches()[0].job().generation(), 1);
}

}  // namespace
}  // namespace ringmaster::coordinator
