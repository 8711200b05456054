// Hot spares (JobSpec.spares) in the job manager: a running job holds idle nodes that no other
// job gets, a lost node of the job is replaced by a spare at once ("spare n3 replaced n2"), the
// pool is refilled when a node frees up, and the spares go when the job ends.
#include <string>
#include <vector>

#include "coordinator/job_manager.h"
#include "coordinator/job_manager_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class SparesTest : public JobManagerTest {
 protected:
  std::string SubmitOk(const v1::JobSpec& spec) {
    auto job = jobs_->Submit(spec, "", alice_);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->job_id() : "";
  }
  // Nodes n1, n2, n3 (one device each; n2's session in `n2_`) and a 2-node job with one spare.
  std::string RunWithOneSpare() {
    AddNode("n1", 1);
    auto n2 = nodes_->Register(NodeRegistration("n2", 1));
    EXPECT_TRUE(n2.ok()) << n2.status();
    n2_ = n2.ok() ? *n2 : 0;
    AddNode("n3", 1);
    v1::JobSpec spec = Spec(2, 1);
    spec.set_spares(1);
    spec.mutable_restart()->set_max_restarts(5);
    return SubmitOk(spec);
  }
  uint64_t n2_ = 0;
};

TEST_F(SparesTest, ARunningJobHoldsAnIdleNodeThatNoOtherJobGets) {
  const std::string id = RunWithOneSpare();
  const v1::JobStatus running = Current(id);
  ASSERT_EQ(running.state(), v1::JOB_STATE_RUNNING) << running.reason();
  EXPECT_EQ(running.assignments(0).node(), "n1");
  EXPECT_EQ(running.assignments(1).node(), "n2");
  EXPECT_THAT(running.spare_nodes(), ElementsAre("n3"));
  const auto events = EventsOf(*jobs_->Get(id), "spare");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].message(), "holding n3 (1 of 1 spares held)");
  // Another job does not get the spare's device.
  const std::string other = SubmitOk(Spec(1, 1));
  EXPECT_EQ(Current(other).state(), v1::JOB_STATE_PENDING);
  // The spare goes with the job: the other job runs on it in the same pass.
  ASSERT_TRUE(jobs_->Cancel(id, "done", alice_).ok());
  EXPECT_THAT(Current(id).spare_nodes(), IsEmpty());
  const v1::JobStatus placed = Current(other);
  ASSERT_EQ(placed.state(), v1::JOB_STATE_RUNNING) << placed.reason();
}

TEST_F(SparesTest, ALostNodeIsReplacedByTheSpareAtOnceAndThePoolRefilled) {
  const std::string id = RunWithOneSpare();
  ASSERT_THAT(Current(id).spare_nodes(), ElementsAre("n3"));
  sink_.sent.clear();
  nodes_->Disconnected("n2", n2_);
  jobs_->OnNodeLost("n2");
  // No free node but the spare: the job runs again at once, on n1 and n3.
  const v1::JobStatus replaced = Current(id);
  ASSERT_EQ(replaced.state(), v1::JOB_STATE_RUNNING) << replaced.reason();
  EXPECT_EQ(replaced.generation(), 2);
  ASSERT_EQ(replaced.assignments_size(), 2);
  EXPECT_EQ(replaced.assignments(0).node(), "n1");
  EXPECT_EQ(replaced.assignments(1).node(), "n3");
  EXPECT_EQ(sink_.Launches().size(), 2u);
  EXPECT_THAT(replaced.spare_nodes(), IsEmpty());  // no node free to hold
  auto events = EventsOf(*jobs_->Get(id), "spare");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].message(), "spare n3 replaced n2");
  // A node frees up: it is the job's spare.
  AddNode("n4", 1);
  EXPECT_THAT(Current(id).spare_nodes(), ElementsAre("n4"));
  events = EventsOf(*jobs_->Get(id), "spare");
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].message(), "holding n4 (1 of 1 spares held)");
}

// The PrepareWorkers sent so far, as "node job count [devices]".
std::vector<std::string> Prepares(const RecordingSink& sink) {
  std::vector<std::string> out;
  for (const auto& [node, message] : sink.sent) {
    if (!message.has_prepare()) continue;
    const v1::PrepareWorkers& p = message.prepare();
    std::string devices;
    for (int d : p.devices()) devices += " " + std::to_string(d);
    out.push_back(node + " " + p.job_id() + " " + std::to_string(p.count()) + devices +
                  (p.count() > 0 && p.spec().spares() != 1 ? " (no spec)" : ""));
  }
  return out;
}

TEST_F(SparesTest, TheSparesAgentIsToldToPrepareTheLaunchAndToDropIt) {
  const std::string id = RunWithOneSpare();
  ASSERT_THAT(Current(id).spare_nodes(), ElementsAre("n3"));
  EXPECT_THAT(Prepares(sink_), ElementsAre("n3 " + id + " 1 0"));
  // The job ends: the spare's agent drops what it prepared.
  sink_.sent.clear();
  ASSERT_TRUE(jobs_->Cancel(id, "done", alice_).ok());
  EXPECT_THAT(Prepares(sink_), ElementsAre("n3 " + id + " 0"));
}

TEST_F(SparesTest, ASpareTakenByTheRelaunchIsNotToldToDropItsPreparation) {
  const std::string id = RunWithOneSpare();
  sink_.sent.clear();
  nodes_->Disconnected("n2", n2_);
  jobs_->OnNodeLost("n2");
  ASSERT_EQ(Current(id).assignments(1).node(), "n3");
  // n3 launches with what it prepared: no drop; a new spare is prepared.
  EXPECT_THAT(Prepares(sink_), IsEmpty());
  AddNode("n4", 1);
  EXPECT_THAT(Prepares(sink_), ElementsAre("n4 " + id + " 1 0"));
}

// A relaunch frees the job's spare; when a waiting job takes it in the same pass, the spare's
// agent is told to drop the standbys it pre-started (they would otherwise live on beside the
// other job's workers).
TEST_F(SparesTest, ASpareAnotherJobTakesIsToldToDropItsPreparation) {
  const std::string id = RunWithOneSpare();
  ASSERT_THAT(Current(id).spare_nodes(), ElementsAre("n3"));
  const std::string other = SubmitOk(Spec(1, 1));
  ASSERT_EQ(Current(other).state(), v1::JOB_STATE_PENDING);
  sink_.sent.clear();
  jobs_->OnWorkerState("n2", Exit(Current(id), 1, 0, /*signal=*/9));
  const v1::JobStatus relaunched = Current(id);
  ASSERT_EQ(relaunched.state(), v1::JOB_STATE_RUNNING) << relaunched.reason();
  ASSERT_EQ(relaunched.generation(), 2);
  const v1::JobStatus placed = Current(other);
  ASSERT_EQ(placed.state(), v1::JOB_STATE_RUNNING) << placed.reason();
  ASSERT_EQ(placed.assignments(0).node(), "n3");
  EXPECT_THAT(relaunched.spare_nodes(), IsEmpty());
  EXPECT_THAT(Prepares(sink_), ElementsAre("n3 " + id + " 0"));
}

// Flap damping: a spare lost twice is not taken again until it has settled (1 min).
TEST_F(SparesTest, AFlappingNodeIsTakenAsASpareOnlyOnceItSettles) {
  const std::string id = RunWithOneSpare();
  ASSERT_THAT(Current(id).spare_nodes(), ElementsAre("n3"));
  for (int loss = 1; loss <= 2; ++loss) {
    auto n3 = nodes_->Register(NodeRegistration("n3", 1));  // its current session
    ASSERT_TRUE(n3.ok());
    ASSERT_TRUE(nodes_->Disconnected("n3", *n3));
    jobs_->OnNodeLost("n3");
    EXPECT_THAT(Current(id).spare_nodes(), IsEmpty()) << "loss " << loss;
    AddNode("n3", 1);
    if (loss == 1) EXPECT_THAT(Current(id).spare_nodes(), ElementsAre("n3"));
  }
  EXPECT_THAT(Current(id).spare_nodes(), IsEmpty());
  clock_.Advance(absl::Seconds(30));
  jobs_->Tick();
  EXPECT_THAT(Current(id).spare_nodes(), IsEmpty());
  clock_.Advance(absl::Seconds(30));
  jobs_->Tick();
  EXPECT_THAT(Current(id).spare_nodes(), ElementsAre("n3"));
}

TEST_F(SparesTest, WithoutASpareTheJobWaitsForANode) {
  AddNode("n1", 1);
  auto n2 = nodes_->Register(NodeRegistration("n2", 1));
  ASSERT_TRUE(n2.ok());
  AddNode("n3", 1);
  v1::JobSpec spec = Spec(2, 1);
  spec.mutable_restart()->set_max_restarts(5);
  const std::string id = SubmitOk(spec);
  ASSERT_EQ(Current(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(Current(id).spare_nodes(), IsEmpty());
  // n3 is free and not held: another job takes it, and the job waits after losing n2.
  const std::string other = SubmitOk(Spec(1, 1));
  ASSERT_EQ(Current(other).state(), v1::JOB_STATE_RUNNING);
  nodes_->Disconnected("n2", *n2);
  jobs_->OnNodeLost("n2");
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  EXPECT_TRUE(EventsOf(*jobs_->Get(id), "spare").empty());
}

}  // namespace
}  // namespace ringmaster::coordinator
