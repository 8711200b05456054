// Elastic data parallelism (JobSpec.min_nodes, spec/elastic.h) in the job manager: a job that
// cannot get all its nodes, at submit or after losing one with no free node to replace it, is
// launched on the largest reachable smaller size (only its data-parallel degree shrinks), says so
// in an "elastic" event and in ringmaster_job_data_parallel, and grows back to its full size
// through a checkpoint once it fits again. A job that is not elastic waits as before.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::HasSubstr;

class ElasticTest : public JobManagerTest {
 protected:
  // DP 4 on four one-device nodes, global batch 8 with micro-batch 2: 2 nodes (DP 2, two
  // micro-batches per replica) are reachable, 3 (DP 3) are not.
  static v1::JobSpec ElasticSpec(int min_nodes) {
    v1::JobSpec spec = Spec(4, 1);
    spec.set_min_nodes(min_nodes);
    spec.mutable_restart()->set_max_restarts(5);
    return spec;
  }
  std::string SubmitOk(const v1::JobSpec& spec) {
    auto job = jobs_->Submit(spec, "", alice_);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->job_id() : "";
  }
  // Nodes n1..n4 (one device each) and the job running on all four; n3's session in `n3_`.
  std::string RunOnFourNodes(int min_nodes) { return RunOnFourNodes(ElasticSpec(min_nodes)); }
  // The same for `spec` (an ElasticSpec with more set).
  std::string RunOnFourNodes(const v1::JobSpec& spec) {
    for (const char* n : {"n1", "n2", "n4"}) AddNode(n, 1);
    auto n3 = nodes_->Register(NodeRegistration("n3", 1));
    EXPECT_TRUE(n3.ok()) << n3.status();
    n3_ = n3.ok() ? *n3 : 0;
    const std::string id = SubmitOk(spec);
    EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RUNNING);
    EXPECT_EQ(Current(id).assignments_size(), 4);
    return id;
  }
  void LoseN3() {
    nodes_->Disconnected("n3", n3_);
    jobs_->OnNodeLost("n3");
  }
  double Dp(const std::string& id, const std::string& which) {
    return SeriesValue(
        registry_.RenderText(),
        absl::StrCat("ringmaster_job_data_parallel{job_id=\"", id, "\",which=\"", which, "\"}"));
  }
  uint64_t n3_ = 0;
};

TEST_F(ElasticTest, ALostNodeWithNoSpareShrinksTheJobToTheLargestReachableDegree) {
  const std::string id = RunOnFourNodes(2);
  EXPECT_EQ(Dp(id, "current"), 4);
  EXPECT_EQ(Dp(id, "desired"), 4);
  sink_.sent.clear();
  LoseN3();
  const v1::JobStatus shrunk = Current(id);
  // Three nodes are left, but DP 3 does not divide the global batch: two of them.
  ASSERT_EQ(shrunk.state(), v1::JOB_STATE_RUNNING) << shrunk.reason();
  EXPECT_EQ(shrunk.generation(), 2);
  EXPECT_EQ(shrunk.elastic_nodes(), 2);
  ASSERT_EQ(shrunk.assignments_size(), 2);
  for (const auto& a : shrunk.assignments()) {
    EXPECT_NE(a.node(), "n3");
    EXPECT_EQ(a.dp_rank(), a.rank());
  }
  const std::vector<v1::LaunchWorkers> launches = sink_.Launches();
  ASSERT_EQ(launches.size(), 2u);
  for (const v1::LaunchWorkers& launch : launches) {
    EXPECT_EQ(launch.world_size(), 2);
    EXPECT_EQ(launch.layout().data(), 2);
    EXPECT_EQ(launch.spec().parallelism().data(), 4);  // the spec stays as submitted
  }
  const auto events = EventsOf(*jobs_->Get(id), "elastic");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_THAT(events[0].message(),
              HasSubstr("shrunk DP 4→2 (4→2 nodes): node n3 lost, no spare; needs 4 nodes"));
  EXPECT_EQ(Dp(id, "current"), 2);
  EXPECT_EQ(Dp(id, "desired"), 4);
}

// elastic_wait: the job that lost n3 waits 30 s for a replacement before shrinking; the wait
// survives a coordinator restart and ends at the same moment.
TEST_F(ElasticTest, ItWaitsForAReplacementBeforeShrinkingAcrossACoordinatorRestart) {
  v1::JobSpec spec = ElasticSpec(2);
  spec.set_elastic_wait_seconds(30);
  const std::string id = RunOnFourNodes(spec);
  ASSERT_EQ(Current(id).assignments_size(), 4);
  const absl::Time lost = clock_.Now();
  LoseN3();
  v1::JobStatus waiting = Current(id);
  ASSERT_EQ(waiting.state(), v1::JOB_STATE_RESTARTING) << waiting.reason();
  EXPECT_THAT(waiting.reason(),
              HasSubstr("waiting up to 30s for a replacement for n3 before shrinking (needs 4"));
  EXPECT_EQ(waiting.elastic_wait_until_unix_nanos(),
            absl::ToUnixNanos(lost + absl::Seconds(30)));
  auto events = EventsOf(*jobs_->Get(id), "elastic");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].message(), "waiting up to 30s for a replacement for n3 before shrinking");
  clock_.Advance(absl::Seconds(20));
  jobs_->Tick();
  jobs_->Schedule();
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  // The coordinator restarts 20 s into the wait; the three nodes register again.
  MakeManager();
  for (const char* n : {"n1", "n2", "n4"}) AddNode(n, 1);
  waiting = Current(id);
  EXPECT_EQ(waiting.state(), v1::JOB_STATE_RESTARTING) << waiting.reason();
  EXPECT_EQ(waiting.elastic_wait_until_unix_nanos(),
            absl::ToUnixNanos(lost + absl::Seconds(30)));
  EXPECT_THAT(waiting.reason(), HasSubstr("waiting up to 30s for a replacement for n3"));
  clock_.Advance(absl::Seconds(9));
  jobs_->Tick();
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  // The wait is over: the next tick shrinks it to DP 2.
  clock_.Advance(absl::Seconds(1));
  jobs_->Tick();
  const v1::JobStatus shrunk = Current(id);
  ASSERT_EQ(shrunk.state(), v1::JOB_STATE_RUNNING) << shrunk.reason();
  EXPECT_EQ(shrunk.elastic_nodes(), 2);
  EXPECT_EQ(shrunk.elastic_wait_until_unix_nanos(), 0);
  events = EventsOf(*jobs_->Get(id), "elastic");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_THAT(events[1].message(), HasSubstr("shrunk DP 4→2 (4→2 nodes): node n3 lost"));
}

TEST_F(ElasticTest, AReplacementWithinTheWaitKeepsTheFullSize) {
  v1::JobSpec spec = ElasticSpec(2);
  spec.set_elastic_wait_seconds(30);
  const std::string id = RunOnFourNodes(spec);
  ASSERT_EQ(Current(id).assignments_size(), 4);
  LoseN3();
  ASSERT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  clock_.Advance(absl::Seconds(5));
  AddNode("n5", 1);  // capacity returns within the wait
  const v1::JobStatus replaced = Current(id);
  ASSERT_EQ(replaced.state(), v1::JOB_STATE_RUNNING) << replaced.reason();
  EXPECT_EQ(replaced.assignments_size(), 4);
  EXPECT_EQ(replaced.elastic_nodes(), 0);
  EXPECT_EQ(replaced.elastic_wait_until_unix_nanos(), 0);
  EXPECT_EQ(Dp(id, "current"), 4);
  // Without elastic_wait (0, the default) the job shrinks at once (the first test above).
}

// A coordinator restart adopts the running shrunk job: its degrees are exported again.
TEST_F(ElasticTest, TheDegreesAreExportedAgainAfterACoordinatorRestart) {
  const std::string id = RunOnFourNodes(2);
  LoseN3();
  ASSERT_EQ(Current(id).elastic_nodes(), 2);
  // The new process starts with no series (this test's registry outlives the manager).
  metrics::GaugeFamily& dp =
      registry_.AddGauge("ringmaster_job_data_parallel", "", {"job_id", "which"});
  dp.Remove({id, "current"});
  dp.Remove({id, "desired"});
  ASSERT_EQ(registry_.RenderText().find("ringmaster_job_data_parallel{"), std::string::npos);
  MakeManager();
  EXPECT_EQ(Current(id).elastic_nodes(), 2);
  EXPECT_EQ(Dp(id, "current"), 2);
  EXPECT_EQ(Dp(id, "desired"), 4);
}

// A peer's exit (its connection to the lost node reset) is heard before the node's loss: the
// event still names the node the job lost, not the one whose rank exited first.
TEST_F(ElasticTest, TheEventNamesTheLostNodeWhicheverFailureCameFirst) {
  const std::string id = RunOnFourNodes(2);
  const v1::JobStatus running = Current(id);
  nodes_->Disconnected("n3", n3_);
  const v1::RankAssignment& peer = running.assignments(0);
  ASSERT_NE(peer.node(), "n3");
  jobs_->OnWorkerState(peer.node(), Exit(running, peer.rank(), 75));
  ASSERT_EQ(Current(id).elastic_nodes(), 2);
  const auto events = EventsOf(*jobs_->Get(id), "elastic");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_THAT(events[0].message(), HasSubstr("(4→2 nodes): node n3 lost, no spare; "));
}

TEST_F(ElasticTest, AJobThatIsNotElasticWaitsForItsNodes) {
  const std::string id = RunOnFourNodes(0);
  LoseN3();
  const v1::JobStatus waiting = Current(id);
  EXPECT_EQ(waiting.state(), v1::JOB_STATE_RESTARTING);
  EXPECT_THAT(waiting.reason(), HasSubstr("needs 4 nodes"));
  EXPECT_EQ(waiting.elastic_nodes(), 0);
  EXPECT_TRUE(EventsOf(*jobs_->Get(id), "elastic").empty());
}

TEST_F(ElasticTest, ItGrowsBackThroughACheckpointOnceItsNodesFitAgain) {
  const std::string id = RunOnFourNodes(2);
  LoseN3();
  const v1::JobStatus shrunk = Current(id);
  ASSERT_EQ(shrunk.elastic_nodes(), 2);
  // Not before its generation has stepped.
  AddNode("n3", 1);
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RUNNING);
  sink_.sent.clear();
  // Its first step's summary runs the pass that decides the grow.
  for (int rank = 0; rank < 2; ++rank) jobs_->OnStepSummary(Summary(shrunk, rank, 10, 1, 1));
  // Four nodes fit (the two free and its own): its ranks are asked to checkpoint and exit.
  const v1::JobStatus growing = Current(id);
  ASSERT_EQ(growing.state(), v1::JOB_STATE_RESTARTING) << growing.reason();
  EXPECT_EQ(growing.stopping_ranks_size(), 2);
  const auto stops = sink_.Stops();
  ASSERT_EQ(stops.size(), 2u);
  EXPECT_GT(stops[0].second.checkpoint_grace_seconds(), 0);
  auto events = EventsOf(*jobs_->Get(id), "elastic");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_THAT(events[1].message(), HasSubstr("growing DP 2→4: 4 nodes fit again"));
  // They did (exit 75): the next generation runs on all four nodes.
  for (const auto& a : shrunk.assignments()) {
    jobs_->OnWorkerState(a.node(), Exit(shrunk, a.rank(), 75));
  }
  const v1::JobStatus grown = Current(id);
  ASSERT_EQ(grown.state(), v1::JOB_STATE_RUNNING) << grown.reason();
  EXPECT_EQ(grown.generation(), 3);
  EXPECT_EQ(grown.elastic_nodes(), 0);
  EXPECT_EQ(grown.assignments_size(), 4);
  events = EventsOf(*jobs_->Get(id), "elastic");
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].message(), "grew DP 2→4 (2→4 nodes)");
  EXPECT_EQ(Dp(id, "current"), 4);
}

// Flap damping: n3 is lost, comes back (the job grows onto it at once: one loss is a reboot), is
// lost again and comes back again. Now it is settling: the shrunk job does not grow onto it, with
// one "elastic" event saying why, until it has stayed up for the hold (1 min); then the ticker's
// pass grows the job.
TEST_F(ElasticTest, AFlappingNodeSettlesBeforeTheJobGrowsOntoItAgain) {
  const std::string id = RunOnFourNodes(2);
  // n3 back, the shrunk generation stepping: the pass that follows decides the grow.
  auto back_and_stepping = [&] {
    auto n3 = nodes_->Register(NodeRegistration("n3", 1));
    ASSERT_TRUE(n3.ok()) << n3.status();
    n3_ = *n3;
    const v1::JobStatus shrunk = Current(id);
    ASSERT_EQ(shrunk.elastic_nodes(), 2) << shrunk.reason();
    for (int rank = 0; rank < 2; ++rank) jobs_->OnStepSummary(Summary(shrunk, rank, 10, 1, 1));
    jobs_->Schedule();
  };
  auto grown_after_exits = [&](const v1::JobStatus& shrunk) {
    for (const auto& a : shrunk.assignments()) {
      jobs_->OnWorkerState(a.node(), Exit(shrunk, a.rank(), 75));
    }
    const v1::JobStatus grown = Current(id);
    EXPECT_EQ(grown.state(), v1::JOB_STATE_RUNNING) << grown.reason();
    EXPECT_EQ(grown.assignments_size(), 4);
  };
  LoseN3();
  v1::JobStatus shrunk = Current(id);
  back_and_stepping();
  ASSERT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING) << "one loss: grown at once";
  grown_after_exits(shrunk);
  clock_.Advance(absl::Minutes(2));
  LoseN3();
  shrunk = Current(id);
  back_and_stepping();
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RUNNING) << Current(id).reason();
  EXPECT_EQ(Current(id).elastic_nodes(), 2);
  auto events = EventsOf(*jobs_->Get(id), "elastic");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().message(),
            "not growing DP 2→4 yet: it needs settling nodes, which drop again too often to be "
            "worth a checkpoint and restart: n3 (lost 2 times lately; settles in 1m)");
  const size_t said = events.size();
  jobs_->Schedule();  // said once
  clock_.Advance(absl::Seconds(59));
  jobs_->Tick();
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(EventsOf(*jobs_->Get(id), "elastic").size(), said);
  // Settled: the ticker runs a pass, which grows the job.
  clock_.Advance(absl::Seconds(1));
  jobs_->Tick();
  ASSERT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING) << Current(id).reason();
  events = EventsOf(*jobs_->Get(id), "elastic");
  EXPECT_THAT(events.back().message(), HasSubstr("growing DP 2→4: 4 nodes fit again"));
  grown_after_exits(shrunk);
}

// A settling node does not hold back a grow that fits elsewhere: n5, up all along, takes n3's
// place.
TEST_F(ElasticTest, AGrowThatFitsWithoutTheSettlingNodeGoesAhead) {
  const std::string id = RunOnFourNodes(2);
  for (int loss = 0; loss < 2; ++loss) {
    auto n3 = nodes_->Register(NodeRegistration("n3", 1));
    ASSERT_TRUE(n3.ok());
    n3_ = *n3;
    LoseN3();
  }
  const v1::JobStatus shrunk = Current(id);
  ASSERT_EQ(shrunk.elastic_nodes(), 2) << shrunk.reason();
  ASSERT_TRUE(nodes_->Register(NodeRegistration("n3", 1)).ok());
  AddNode("n5", 1);
  for (int rank = 0; rank < 2; ++rank) jobs_->OnStepSummary(Summary(shrunk, rank, 10, 1, 1));
  jobs_->Schedule();
  ASSERT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING) << Current(id).reason();
  for (const auto& a : shrunk.assignments()) {
    jobs_->OnWorkerState(a.node(), Exit(shrunk, a.rank(), 75));
  }
  const v1::JobStatus grown = Current(id);
  ASSERT_EQ(grown.state(), v1::JOB_STATE_RUNNING) << grown.reason();
  ASSERT_EQ(grown.assignments_size(), 4);
  // Its launch avoids the settling node too (n3 sorts before n5).
  for (const auto& a : grown.assignments()) EXPECT_NE(a.node(), "n3");
  for (const auto& e : EventsOf(*jobs_->Get(id), "elastic")) {
    EXPECT_THAT(e.message(), ::testing::Not(HasSubstr("not growing")));
  }
}

// Any placement avoids a settling node while other capacity fits, and uses it when none does.
TEST_F(ElasticTest, APlacementAvoidsASettlingNodeWhileOthersFit) {
  for (const char* n : {"n1", "n2"}) AddNode(n, 1);
  for (int loss = 0; loss < 2; ++loss) {
    auto n3 = nodes_->Register(NodeRegistration("n3", 1));
    ASSERT_TRUE(n3.ok());
    nodes_->Disconnected("n3", *n3);
    jobs_->OnNodeLost("n3");
  }
  ASSERT_TRUE(nodes_->Register(NodeRegistration("n3", 1)).ok());
  AddNode("n4", 1);
  const std::string two = SubmitOk(Spec(2, 1));
  const v1::JobStatus placed = Current(two);
  ASSERT_EQ(placed.state(), v1::JOB_STATE_RUNNING) << placed.reason();
  for (const auto& a : placed.assignments()) EXPECT_NE(a.node(), "n3");  // n1, n2 are best fit
  const std::string one = SubmitOk(Spec(1, 1));
  ASSERT_EQ(Current(one).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Current(one).assignments(0).node(), "n4");  // not n3, which sorts first
  // ringctl plan previews the same: n3 is all that is free, so it names n3.
  auto plan = jobs_->Plan(Spec(1, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->assignments_size(), 1);
  EXPECT_EQ(plan->assignments(0).node(), "n3");
  const std::string last = SubmitOk(Spec(1, 1));
  ASSERT_EQ(Current(last).state(), v1::JOB_STATE_RUNNING) << Current(last).reason();
  EXPECT_EQ(Current(last).assignments(0).node(), "n3");  // nothing else is free
}

// ringctl plan keeps off a settling node while others fit, as the placement would.
TEST_F(ElasticTest, APlanKeepsOffASettlingNode) {
  for (int loss = 0; loss < 2; ++loss) {
    auto n1 = nodes_->Register(NodeRegistration("n1", 1));
    ASSERT_TRUE(n1.ok());
    nodes_->Disconnected("n1", *n1);
    jobs_->OnNodeLost("n1");
  }
  AddNode("n1", 1);  // settling; the pass reads it
  AddNode("n2", 1);
  auto plan = jobs_->Plan(Spec(1, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->assignments_size(), 1);
  EXPECT_EQ(plan->assignments(0).node(), "n2");  // n1 sorts first
}

// The node is back before the shrunk generation's first step: that step's summary decides the
// grow (no other event may come to run a pass).
TEST_F(ElasticTest, TheFirstStepOfAShrunkGenerationGrowsItWhenItsNodesAreBack) {
  const std::string id = RunOnFourNodes(2);
  LoseN3();
  const v1::JobStatus shrunk = Current(id);
  ASSERT_EQ(shrunk.elastic_nodes(), 2);
  AddNode("n3", 1);
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RUNNING);  // not stepped yet
  jobs_->OnStepSummary(Summary(shrunk, 0, 10, 1, 1));
  const v1::JobStatus growing = Current(id);
  ASSERT_EQ(growing.state(), v1::JOB_STATE_RESTARTING) << growing.reason();
  EXPECT_THAT(EventsOf(*jobs_->Get(id), "elastic").back().message(),
              HasSubstr("growing DP 2→4: 4 nodes fit again"));
}

TEST_F(ElasticTest, ASubmittedJobStartsSmallerWhenItsNodesAreNotThere) {
  for (const char* n : {"n1", "n2", "n3", "n4"}) AddNode(n, 1);
  const std::string other = SubmitOk(Spec(1, 1));
  ASSERT_EQ(Current(other).state(), v1::JOB_STATE_RUNNING);
  // Three nodes free: the full size waits (devices are held for it as they free up), DP 3 is
  // unreachable, and two nodes are taken despite the devices held for its own full size.
  const std::string id = SubmitOk(ElasticSpec(1));
  const v1::JobStatus started = Current(id);
  ASSERT_EQ(started.state(), v1::JOB_STATE_RUNNING) << started.reason();
  EXPECT_EQ(started.elastic_nodes(), 2);
  const auto events = EventsOf(*jobs_->Get(id), "elastic");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_THAT(events[0].message(), HasSubstr("started at DP 2 of 4 on 2 nodes: needs 4 nodes"));
  // Nothing stays held for it once it runs: a job behind it takes the last free node.
  EXPECT_THAT(registry_.RenderText(),
              ::testing::Not(HasSubstr(absl::StrCat("ringmaster_devices_held{job_id=\"", id))));
  const std::string small = SubmitOk(Spec(1, 1));
  EXPECT_EQ(Current(small).state(), v1::JOB_STATE_RUNNING) << Current(small).reason();
}

TEST_F(ElasticTest, PlanListsTheReachableSizesAndRefusesAnUnreachableMinimum) {
  auto plan = jobs_->Plan(ElasticSpec(2));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->plan().reasons(),
              ::testing::Contains("elastic (min_nodes 2, elastic_batch global): reachable "
                                  "sizes 4 nodes (DP 4, accumulation 1), 2 nodes (DP 2, "
                                  "accumulation 2); the global batch kept"));
  // Keeping each replica's batch, DP 3 is reachable too, and the learning rate follows DP.
  v1::JobSpec per_replica = ElasticSpec(2);
  per_replica.set_elastic_batch(v1::ELASTIC_BATCH_PER_REPLICA);
  per_replica.set_elastic_warmup_steps(20);
  plan = jobs_->Plan(per_replica);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->plan().reasons(),
              ::testing::Contains("elastic (min_nodes 2, elastic_batch per_replica): reachable "
                                  "sizes 4 nodes (DP 4, accumulation 1), 3 nodes (DP 3, "
                                  "accumulation 1), 2 nodes (DP 2, accumulation 1); each "
                                  "replica's batch kept, the learning rate scaled by DP / 4, "
                                  "ramped over 20 steps after each change of DP"));
  // A bad elastic key is refused, naming it.
  per_replica.set_elastic_wait_seconds(-5);
  auto bad = jobs_->Submit(per_replica, "", alice_);
  ASSERT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("elastic_wait_seconds: must be"));
  // The planner chooses the layout (DP 4 here): the rule is checked against its choice.
  v1::JobSpec planned = ElasticSpec(3);
  planned.clear_parallelism();
  auto refused = jobs_->Submit(planned, "", alice_);
  ASSERT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("min_nodes: must leave a size below nodes"));
}

}  // namespace
}  // namespace ringmaster::coordinator
