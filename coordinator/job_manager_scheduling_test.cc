// The order jobs get devices in: RESTARTING jobs, then PENDING ones; the first that does not fit
// has the devices nearest to being free held for it (JobManagerOptions::
// hold_devices_for_oldest_pending), so pending jobs after it that would fit into what frees up
// do not keep it waiting (and PlanJob says so); a RESTARTING job takes any free device; and with
// holding off, every job takes whatever is free.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class SchedulingTest : public JobManagerTest {
 protected:
  // Nodes n1 and n2 with 2 devices each; a one-node job running on n1 (`first_`), then a job
  // needing both nodes (`large_`), pending.
  void RunOneAndQueueALargeJob() {
    AddNode("n1", 2);
    AddNode("n2", 2);
    first_ = SubmitOk(Spec(1, 2));
    ASSERT_EQ(Current(first_).state(), v1::JOB_STATE_RUNNING);
    ASSERT_EQ(Current(first_).assignments(0).node(), "n1");
    large_ = SubmitOk(Spec(2, 2));
    ASSERT_EQ(Current(large_).state(), v1::JOB_STATE_PENDING);
  }
  // Nodes n1, n2 and n3 with 2 devices each; a restartable two-node job on n1 and n2 (returned)
  // and `first_` on n3 (the only free node); then n2 is lost, so the two-node job restarts and
  // does not fit.
  std::string LoseANodeOfATwoNodeJob() {
    AddNode("n1", 2);
    auto n2 = nodes_->Register(NodeRegistration("n2", 2));
    EXPECT_TRUE(n2.ok()) << n2.status();
    if (!n2.ok()) return "";
    AddNode("n3", 2);
    v1::JobSpec restarts = Spec(2, 2);
    restarts.mutable_restart()->set_max_restarts(3);
    const std::string running = SubmitOk(restarts);
    const v1::JobStatus placed = Current(running);
    EXPECT_EQ(placed.assignments_size(), 4);
    if (placed.assignments_size() != 4) return "";
    EXPECT_EQ(placed.assignments(2).node(), "n2");
    first_ = SubmitOk(Spec(1, 2));
    EXPECT_EQ(Current(first_).state(), v1::JOB_STATE_RUNNING);
    nodes_->Disconnected("n2", *n2);
    jobs_->OnNodeLost("n2");
    return running;
  }
  std::string SubmitOk(const v1::JobSpec& spec) {
    auto job = jobs_->Submit(spec, "", alice_);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->job_id() : "";
  }
  // Every rank of the job's current generation exits 0.
  void Succeed(const std::string& id) {
    const v1::JobStatus running = Current(id);
    for (const auto& a : running.assignments()) {
      jobs_->OnWorkerState(a.node(), Exit(running, a.rank(), 0));
    }
    ASSERT_EQ(Current(id).state(), v1::JOB_STATE_SUCCEEDED);
  }
  std::string first_, large_;
};

// A node lost after the pass read the free devices, before a job is placed on it: Allocate
// refuses that placement, and the pass reads the free devices again and places the job elsewhere
// at once (not at some later pass).
TEST_F(SchedulingTest, APlacementOnANodeLostDuringThePassIsMadeAgainElsewhere) {
  AddNode("n1", 1);
  auto n2 = nodes_->Register(NodeRegistration("n2", 1));
  ASSERT_TRUE(n2.ok()) << n2.status();
  AddNode("n3", 1);
  const std::string big = SubmitOk(Spec(3, 1));
  ASSERT_EQ(Current(big).state(), v1::JOB_STATE_RUNNING);
  const std::string x = SubmitOk(Spec(1, 1));
  const std::string y = SubmitOk(Spec(1, 1));
  ASSERT_EQ(Current(y).state(), v1::JOB_STATE_PENDING);
  // n2 is lost while x is launched, in the pass that big's end runs: y's placement, made on what
  // the pass read before, is on n2.
  sink_.on_send = [&](const std::string&, const v1::CoordinatorMessage& m) {
    if (m.has_launch() && m.launch().job().job_id() == x) nodes_->Disconnected("n2", *n2);
  };
  Succeed(big);
  sink_.on_send = nullptr;
  EXPECT_FALSE(nodes_->IsAlive("n2"));
  ASSERT_EQ(Current(x).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Current(x).assignments(0).node(), "n1");
  ASSERT_EQ(Current(y).state(), v1::JOB_STATE_RUNNING) << Current(y).reason();
  EXPECT_EQ(Current(y).assignments(0).node(), "n3");
}

TEST_F(SchedulingTest, TheOldestWaitingJobIsNotStarvedByYoungerSmallerOnes) {
  RunOneAndQueueALargeJob();
  EXPECT_THAT(Current(large_).reason(),
              HasSubstr("devices are held for it as they free up on n1 (2 devices), n2 (2 "
                        "devices)"));
  // n2 is free, and a one-node job would fit there: it waits behind the large one instead.
  const std::string small = SubmitOk(Spec(1, 2));
  EXPECT_EQ(Current(small).state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(Current(small).reason(),
              HasSubstr("waiting behind job " + large_ +
                        ": it would fit only on devices held for that job, on n1 (2 devices), "
                        "n2 (2 devices)"));

  // So would a plan of another: it says what Submit would decide.
  auto plan = jobs_->Plan(Spec(1, 2));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->assignments_size(), 0);
  EXPECT_THAT(plan->pending_reason(), HasSubstr("waiting behind job " + large_));

  // Prometheus sees what is held: n2's devices idle, n1's still running the first job.
  const std::string text = registry_.RenderText();
  EXPECT_THAT(text,
              HasSubstr("ringmaster_devices_held{job_id=\"" + large_ + "\",state=\"idle\"} 2"));
  EXPECT_THAT(text,
              HasSubstr("ringmaster_devices_held{job_id=\"" + large_ + "\",state=\"busy\"} 2"));

  Succeed(first_);  // n1 frees: the large job runs on both nodes, the small one waits for room
  EXPECT_EQ(Current(large_).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Current(small).state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(Current(small).reason(), Not(HasSubstr("waiting behind")));
  // Now the small job is the first that does not fit: it holds, the large one's series are gone.
  EXPECT_THAT(registry_.RenderText(),
              Not(HasSubstr("ringmaster_devices_held{job_id=\"" + large_ + "\"")));
  EXPECT_THAT(registry_.RenderText(),
              HasSubstr("ringmaster_devices_held{job_id=\"" + small + "\",state=\"busy\"} 2"));
  Succeed(large_);
  EXPECT_EQ(Current(small).state(), v1::JOB_STATE_RUNNING);
}

// Only the oldest waiting job holds devices: the next one waits behind it like any other.
TEST_F(SchedulingTest, OnlyTheOldestWaitingJobHoldsDevices) {
  RunOneAndQueueALargeJob();
  const std::string second_large = SubmitOk(Spec(2, 2));
  EXPECT_THAT(Current(second_large).reason(), Not(HasSubstr("held for it")));
  Succeed(first_);
  EXPECT_EQ(Current(large_).state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(Current(second_large).reason(), HasSubstr("devices are held for it"));
}

// A job larger than the cluster could ever hold holds nothing: younger jobs run meanwhile.
TEST_F(SchedulingTest, AJobThatWouldNotFitEvenOnAnIdleClusterHoldsNothing) {
  AddNode("n1", 2);
  const std::string huge = SubmitOk(Spec(3, 2));
  EXPECT_EQ(Current(huge).state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(Current(huge).reason(), Not(HasSubstr("held for it")));
  const std::string small = SubmitOk(Spec(1, 2));
  EXPECT_EQ(Current(small).state(), v1::JOB_STATE_RUNNING);
}

// A running job that lost a node and no longer fits is the first to hold devices (running jobs
// between generations are placed before pending ones): a job submitted later that would fit on
// them waits, and the restarting job relaunches when enough frees up.
TEST_F(SchedulingTest, ARestartingJobThatDoesNotFitHoldsDevices) {
  const std::string running = LoseANodeOfATwoNodeJob();
  ASSERT_EQ(Current(running).state(), v1::JOB_STATE_RESTARTING);
  EXPECT_THAT(Current(running).reason(),
              HasSubstr("devices are held for it as they free up on n1 (2 devices), n3 (2 "
                        "devices)"));
  const std::string later = SubmitOk(Spec(1, 2));  // n1 is free, and held
  EXPECT_EQ(Current(later).state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(Current(later).reason(), HasSubstr("waiting behind job " + running));

  Succeed(first_);
  EXPECT_EQ(Current(running).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Current(running).generation(), 2);
  EXPECT_EQ(Current(later).state(), v1::JOB_STATE_PENDING);
}

// The devices held are those nearest to being free: a node with free devices before an idle-less
// one, and on a node its free devices before its busy ones, so the waiting job runs as soon as
// the fewest jobs end.
TEST_F(SchedulingTest, TheDevicesNearestToBeingFreeAreHeld) {
  AddNode("n1", 2);
  AddNode("n2", 2);
  AddNode("n3", 4);
  const std::string on_n1 = SubmitOk(Spec(1, 2));
  const std::string on_n2 = SubmitOk(Spec(1, 2));
  const std::string half_n3 = SubmitOk(Spec(1, 2));  // best fit: n3's devices 0 and 1
  ASSERT_EQ(Current(half_n3).assignments(0).node(), "n3");
  large_ = SubmitOk(Spec(2, 4));  // needs n3 whole and another 4-device node: never all free
  EXPECT_THAT(Current(large_).reason(), Not(HasSubstr("held for it")));
  const std::string two_nodes = SubmitOk(Spec(2, 2));  // n3's free half and n1 or n2
  EXPECT_THAT(Current(two_nodes).reason(),
              HasSubstr("devices are held for it as they free up on n1 (2 devices), n3 (2 "
                        "devices)"));
  // n3's free devices 2 and 3 are held, not its busy 0 and 1: a one-node job cannot take them.
  const std::string small = SubmitOk(Spec(1, 2));
  EXPECT_THAT(Current(small).reason(), HasSubstr("waiting behind job " + two_nodes));
  Succeed(on_n1);  // n1 and n3's free half: the held job runs there
  EXPECT_EQ(Current(two_nodes).state(), v1::JOB_STATE_RUNNING);
}

// A RESTARTING job takes any free device, held or not: here an older restarting job that lost a
// node holds n4 (with n1 and n3), and a younger one sharing n4 restarts there all the same.
TEST_F(SchedulingTest, ARestartingJobTakesHeldDevices) {
  for (const char* node : {"n1", "n3", "n4"}) AddNode(node, 2);
  auto n2 = nodes_->Register(NodeRegistration("n2", 2));
  ASSERT_TRUE(n2.ok());
  v1::JobSpec restarts = Spec(3, 2);
  restarts.mutable_restart()->set_max_restarts(3);
  const std::string older = SubmitOk(restarts);  // n1, n2, n3
  v1::JobSpec one = Spec(1, 1);
  one.mutable_restart()->set_max_restarts(3);
  const std::string younger = SubmitOk(one);  // n4's device 0
  first_ = SubmitOk(Spec(1, 1));              // n4's device 1
  const v1::JobStatus gen1 = Current(younger);
  ASSERT_EQ(gen1.assignments(0).node(), "n4");

  nodes_->Disconnected("n2", *n2);
  jobs_->OnNodeLost("n2");
  ASSERT_THAT(Current(older).reason(),
              HasSubstr("devices are held for it as they free up on n1 (2 devices), n3 (2 "
                        "devices), n4 (2 devices)"));
  jobs_->OnWorkerState("n4", Exit(gen1, 0, 0, /*signal=*/9));
  EXPECT_EQ(Current(younger).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Current(younger).generation(), 2);
  EXPECT_EQ(Current(older).state(), v1::JOB_STATE_RESTARTING);

  // Cancelling the holder ends its held-devices series.
  const std::string series = "ringmaster_devices_held{job_id=\"" + older + "\"";
  EXPECT_THAT(registry_.RenderText(), HasSubstr(series));
  ASSERT_TRUE(jobs_->Cancel(older, "", alice_).ok());
  EXPECT_THAT(registry_.RenderText(), Not(HasSubstr(series)));
}

// A scheduling pass reads the free devices once and takes each placement off them: when a job
// spanning four nodes ends, four waiting one-node jobs run on one node each in that one pass, and
// waiting jobs of the same shape each get their own reason.
TEST_F(SchedulingTest, OnePassPlacesEveryWaitingJobOnWhatTheJobsBeforeItLeft) {
  for (const char* node : {"n1", "n2", "n3", "n4"}) AddNode(node, 2);
  large_ = SubmitOk(Spec(4, 2));
  ASSERT_EQ(Current(large_).state(), v1::JOB_STATE_RUNNING);
  std::vector<std::string> waiting;
  for (int i = 0; i < 5; ++i) waiting.push_back(SubmitOk(Spec(1, 2)));
  EXPECT_THAT(Current(waiting[0]).reason(),
              HasSubstr("devices are held for it as they free up on n1 (2 devices)"));
  for (int i = 1; i < 5; ++i) {
    EXPECT_THAT(Current(waiting[i]).reason(),
                HasSubstr("devices are also held for job " + waiting[0] + " on n1 (2 devices)"))
        << i;
  }

  Succeed(large_);
  std::set<std::string> nodes;
  for (int i = 0; i < 4; ++i) {
    const v1::JobStatus placed = Current(waiting[i]);
    ASSERT_EQ(placed.state(), v1::JOB_STATE_RUNNING) << i;
    for (const auto& a : placed.assignments()) nodes.insert(a.node());
  }
  EXPECT_EQ(nodes.size(), 4u);
  EXPECT_EQ(Current(waiting[4]).state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(Current(waiting[4]).reason(), HasSubstr("devices are held for it"));
}

// A job held back behind another is told so even when the holder has the same shape: its
// answer is not the holder's.
TEST_F(SchedulingTest, AJobShapedLikeTheHolderWaitsBehindIt) {
  const std::string running = LoseANodeOfATwoNodeJob();
  ASSERT_EQ(Current(running).state(), v1::JOB_STATE_RESTARTING);
  const std::string alike = SubmitOk(Spec(2, 2));
  EXPECT_EQ(Current(alike).state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(Current(alike).reason(), HasSubstr("devices are also held for job " + running));
}

// A hold's reason names its first 8 nodes and counts the rest.
TEST_F(SchedulingTest, AHoldOnManyNodesNamesTheFirstEight) {
  for (int i = 1; i <= 10; ++i) AddNode(absl::StrFormat("n%02d", i), 1);
  first_ = SubmitOk(Spec(1, 1));
  large_ = SubmitOk(Spec(10, 1));
  EXPECT_THAT(Current(large_).reason(),
              HasSubstr("devices are held for it as they free up on n01 (1 device), n02 (1 "
                        "device), n03 (1 device), n04 (1 device), n05 (1 device), n06 (1 "
                        "device), n07 (1 device), n08 (1 device), and 2 more nodes (2 devices)"));
}

TEST_F(SchedulingTest, WithoutHoldingEveryJobTakesWhatIsFree) {
  hold_devices_ = false;
  MakeManager();
  RunOneAndQueueALargeJob();
  EXPECT_THAT(Current(large_).reason(), Not(HasSubstr("held for it")));
  const std::string small = SubmitOk(Spec(1, 2));
  EXPECT_EQ(Current(small).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Current(small).assignments(0).node(), "n2");
}

}  // namespace
}  // namespace ringmaster::coordinator
