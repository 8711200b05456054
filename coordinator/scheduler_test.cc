#include "coordinator/scheduler.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "coordinator/testing/node_registration.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::HasSubstr;

Layout Shape(int nodes, int devices_per_node) {
  Layout layout;
  layout.nodes = nodes;
  layout.devices_per_node = devices_per_node;
  layout.data = nodes * devices_per_node;
  return layout;
}

class SchedulingPassTest : public ::testing::Test {
 protected:
  SchedulingPassTest() : nodes_(&clock_, absl::Seconds(3), absl::Hours(1), nullptr) {}

  SchedulingPass::Candidate Job(const std::string& id, Layout layout, bool pending = true) {
    return {id, layout, pending, &no_exclusions_};
  }
  // Runs `id` on `devices` devices of node "a" outside any pass.
  void Occupy(const std::string& id, int devices) {
    absl::StatusOr<Placement> placed = Place(nodes_.FreeCapacity(), Shape(1, devices), {});
    ASSERT_TRUE(placed.ok()) << placed.status();
    ASSERT_TRUE(nodes_.Allocate(id, *placed).ok());
  }

  FakeClock clock_;
  NodeManager nodes_;
  const std::set<std::string> no_exclusions_;
};

TEST_F(SchedulingPassTest, APlacedJobHasItsDevicesAllocated) {
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 2)).ok());
  SchedulingPass pass(&nodes_, /*hold_for_oldest_pending=*/true);
  const SchedulingPass::Outcome outcome = pass.Place(Job("j", Shape(1, 2)));
  ASSERT_EQ(outcome.kind, SchedulingPass::Outcome::kPlaced) << outcome.reason;
  EXPECT_EQ(outcome.placement.assignments.size(), 2u);
  for (const NodeCapacity& node : nodes_.FreeCapacity()) EXPECT_TRUE(node.free.empty());
  // The pass took them from its own view too: the next job waits.
  EXPECT_EQ(pass.Place(Job("k", Shape(1, 1))).kind, SchedulingPass::Outcome::kWaiting);
}

TEST_F(SchedulingPassTest, TheFirstMisfitHoldsDevicesThatPendingJobsAfterItDoNotTake) {
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 4)).ok());
  Occupy("busy", 2);
  SchedulingPass pass(&nodes_, /*hold_for_oldest_pending=*/true);
  const SchedulingPass::Outcome big = pass.Place(Job("big", Shape(1, 4)));
  ASSERT_EQ(big.kind, SchedulingPass::Outcome::kWaiting);
  EXPECT_THAT(big.reason, HasSubstr("devices are held for it as they free up on a (4 devices)"));
  EXPECT_EQ(pass.hold().job_id, "big");
  EXPECT_EQ(IdleHeldDevices(pass.hold(), nodes_.FreeCapacity()), 2);

  const SchedulingPass::Outcome small = pass.Place(Job("small", Shape(1, 2)));
  ASSERT_EQ(small.kind, SchedulingPass::Outcome::kWaiting);
  EXPECT_THAT(small.reason, HasSubstr("waiting behind job big"));
  // A restarting job is running between generations: it takes held devices.
  const SchedulingPass::Outcome restarting =
      pass.Place(Job("restarting", Shape(1, 2), /*pending=*/false));
  EXPECT_EQ(restarting.kind, SchedulingPass::Outcome::kPlaced) << restarting.reason;
}

TEST_F(SchedulingPassTest, WithoutHoldingEveryJobTakesWhatIsFree) {
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 4)).ok());
  Occupy("busy", 2);
  SchedulingPass pass(&nodes_, /*hold_for_oldest_pending=*/false);
  EXPECT_EQ(pass.Place(Job("big", Shape(1, 4))).kind, SchedulingPass::Outcome::kWaiting);
  EXPECT_TRUE(pass.hold().job_id.empty());
  EXPECT_EQ(pass.Place(Job("small", Shape(1, 2))).kind, SchedulingPass::Outcome::kPlaced);
}

// Settling nodes are avoided first, then excluded ones are used again before them: with n1
// excluded and n2 settling, a one-device job goes to n1, and a job held behind takes n1's place.
TEST(PlaceBehindTest, AnExcludedNodeIsUsedAgainBeforeASettlingOne) {
  std::vector<NodeCapacity> free = {{"n1", {{0, 0}}}, {"n2", {{0, 0}}}};
  absl::StatusOr<Placement> placed = PlaceBehind(free, nullptr, Shape(1, 1), {"n1"}, {"n2"});
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->assignments[0].node(), "n1");
  free.push_back({"n3", {{0, 0}}});
  placed = PlaceBehind(free, nullptr, Shape(1, 1), {"n1"}, {"n2"});
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->assignments[0].node(), "n3");
  placed = PlaceBehind(free, nullptr, Shape(3, 1), {"n1"}, {"n2"});
  ASSERT_TRUE(placed.ok()) << placed.status();  // all of them when nothing else fits
  EXPECT_EQ(placed->assignments.size(), 3u);
}

// The devices held for the first misfit follow the same order: with every device busy, a job
// that avoids b (excluded) and a (settling) holds b's, though a sorts first.
TEST_F(SchedulingPassTest, AHoldKeepsOffASettlingNodeBeforeAnExcludedOne) {
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 1)).ok());
  ASSERT_TRUE(nodes_.Register(NodeRegistration("b", 1)).ok());
  Occupy("busy-1", 1);
  Occupy("busy-2", 1);
  SchedulingPass pass(&nodes_, /*hold_for_oldest_pending=*/true);
  const std::set<std::string> excluded = {"b"}, settling = {"a"};
  const SchedulingPass::Outcome waiting =
      pass.Place({"job", Shape(1, 1), /*pending=*/true, &excluded, &settling});
  ASSERT_EQ(waiting.kind, SchedulingPass::Outcome::kWaiting);
  ASSERT_EQ(pass.hold().job_id, "job");
  ASSERT_EQ(pass.hold().placement.assignments.size(), 1u);
  EXPECT_EQ(pass.hold().placement.assignments[0].node(), "b");
}

TEST_F(SchedulingPassTest, AJobThatWouldNeverFitHoldsNothing) {
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 2)).ok());
  SchedulingPass pass(&nodes_, /*hold_for_oldest_pending=*/true);
  const SchedulingPass::Outcome outcome = pass.Place(Job("huge", Shape(2, 2)));
  EXPECT_EQ(outcome.kind, SchedulingPass::Outcome::kWaiting);
  EXPECT_TRUE(pass.hold().job_id.empty());
  EXPECT_EQ(pass.Place(Job("small", Shape(1, 2))).kind, SchedulingPass::Outcome::kPlaced);
}

TEST_F(SchedulingPassTest, AnImpossibleLayoutIsUnplaceable) {
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 2)).ok());
  SchedulingPass pass(&nodes_, /*hold_for_oldest_pending=*/true);
  Layout layout = Shape(1, 2);
  layout.data = 3;  // tensor * pipeline * data != nodes * devices_per_node
  const SchedulingPass::Outcome outcome = pass.Place(Job("bad", layout));
  EXPECT_EQ(outcome.kind, SchedulingPass::Outcome::kUnplaceable);
  EXPECT_FALSE(outcome.reason.empty());
}

TEST_F(SchedulingPassTest, AnAllocationOfALostNodeIsRefusedAndTheDevicesAreReadAgain) {
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 2)).ok());
  ASSERT_TRUE(nodes_.Register(NodeRegistration("b", 2)).ok());
  SchedulingPass pass(&nodes_, /*hold_for_oldest_pending=*/true);
  // The pass reads the free devices at its first placement: "a" is among them.
  ASSERT_EQ(pass.Place(Job("first", Shape(1, 2))).kind, SchedulingPass::Outcome::kPlaced);
  clock_.Advance(absl::Seconds(4));  // both silent: lost
  ASSERT_EQ(nodes_.CheckLiveness().size(), 2u);
  // The pass still counts the other node's devices free: the node manager refuses them.
  const SchedulingPass::Outcome outcome = pass.Place(Job("second", Shape(1, 2)));
  EXPECT_EQ(outcome.kind, SchedulingPass::Outcome::kRefused);
  EXPECT_EQ(pass.refused(), 1);
  // Read again, they are gone: the job waits.
  EXPECT_EQ(pass.Place(Job("second", Shape(1, 2))).kind, SchedulingPass::Outcome::kWaiting);
}

TEST(SchedulerTest, HeldNodesNamesEightNodesAndCountsTheRest) {
  Placement placement;
  for (int n = 0; n < 10; ++n) {
    for (int d = 0; d < (n == 0 ? 1 : 2); ++d) {
      v1::RankAssignment a;
      a.set_node(absl::StrCat("n", n));
      a.set_local_device(d);
      placement.assignments.push_back(a);
    }
  }
  EXPECT_EQ(HeldNodes(placement),
            "n0 (1 device), n1 (2 devices), n2 (2 devices), n3 (2 devices), n4 (2 devices), "
            "n5 (2 devices), n6 (2 devices), n7 (2 devices), and 2 more nodes (4 devices)");
}

TEST(SchedulerTest, CrashLoopBackoffDoublesFromTheSecondFailureUpToItsMaximum) {
  const absl::Duration base = absl::Seconds(1), max = absl::Seconds(5);
  struct Case {
    int failures;
    absl::Duration want;
  };
  for (const Case& c :
       {Case{0, absl::ZeroDuration()}, Case{1, absl::ZeroDuration()}, Case{2, absl::Seconds(1)},
        Case{3, absl::Seconds(2)}, Case{4, absl::Seconds(4)}, Case{5, absl::Seconds(5)},
        Case{40, absl::Seconds(5)}}) {
    EXPECT_EQ(CrashLoopBackoff(c.failures, base, max), c.want) << c.failures;
  }
  EXPECT_EQ(CrashLoopBackoff(5, absl::ZeroDuration(), max), absl::ZeroDuration());
}

}  // namespace
}  // namespace ringmaster::coordinator
