#include "coordinator/launch_plan.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

v1::RankAssignment Rank(int rank, const std::string& node, int device) {
  v1::RankAssignment a;
  a.set_rank(rank);
  a.set_node(node);
  a.set_local_device(device);
  return a;
}

// A job of generation 3 after 2 restarts, placed as `ranks`; tensor 0 leaves its layout to the
// plan.
v1::JobStatus Placed(const std::vector<v1::RankAssignment>& ranks, int tensor, int pipeline,
                     int data) {
  v1::JobStatus status;
  status.set_job_id("gpt-abc");
  status.set_generation(3);
  status.set_restarts(2);
  v1::JobSpec* spec = status.mutable_spec();
  spec->set_name("gpt");
  spec->set_nodes(2);
  spec->set_devices_per_node(2);
  spec->mutable_parallelism()->set_tensor(tensor);
  spec->mutable_parallelism()->set_pipeline(pipeline);
  spec->mutable_parallelism()->set_data(data);
  v1::ParallelismSpec* planned = status.mutable_plan()->mutable_parallelism();
  planned->set_tensor(2);
  planned->set_pipeline(1);
  planned->set_data(2);
  for (const v1::RankAssignment& a : ranks) *status.add_assignments() = a;
  return status;
}

TEST(LaunchPlanTest, OneMessagePerNodeWithItsRanksAndTheJobsLaunchFields) {
  const v1::JobStatus status =
      Placed({Rank(0, "b", 0), Rank(1, "b", 1), Rank(2, "a", 0), Rank(3, "a", 1)}, 1, 1, 4);
  const LaunchPlan plan = PlanLaunch(status, "b.local", 29517);
  EXPECT_EQ(plan.world_size, 4);
  ASSERT_EQ(plan.messages.size(), 2u);
  const std::vector<std::pair<std::string, std::vector<int>>> expected = {{"a", {2, 3}},
                                                                          {"b", {0, 1}}};
  for (const auto& [node, ranks] : expected) {
    SCOPED_TRACE(node);
    ASSERT_TRUE(plan.messages.at(node).has_launch());
    const v1::LaunchWorkers& launch = plan.messages.at(node).launch();
    ASSERT_EQ(launch.assignments_size(), static_cast<int>(ranks.size()));
    for (size_t i = 0; i < ranks.size(); ++i) {
      EXPECT_EQ(launch.assignments(i).rank(), ranks[i]);
      EXPECT_EQ(launch.assignments(i).node(), node);
    }
    EXPECT_EQ(launch.job().job_id(), "gpt-abc");
    EXPECT_EQ(launch.job().generation(), 3);
    EXPECT_EQ(launch.spec().name(), "gpt");
    EXPECT_EQ(launch.layout().tensor(), 1);
    EXPECT_EQ(launch.layout().pipeline(), 1);
    EXPECT_EQ(launch.layout().data(), 4);
    EXPECT_EQ(launch.world_size(), 4);
    EXPECT_EQ(launch.master_addr(), "b.local");
    EXPECT_EQ(launch.master_port(), 29517);
    EXPECT_EQ(launch.restart_count(), 2);
  }
  EXPECT_EQ(plan.Summary(3), "placed 4 ranks on 2 nodes (generation 3)");
}

TEST(LaunchPlanTest, TheLayoutComesFromThePlanWhenTheSpecLeavesIt) {
  struct Case {
    int tensor, pipeline, data;
    int want_tensor, want_pipeline, want_data;
  };
  for (const Case& c : {Case{0, 0, 0, 2, 1, 2}, Case{1, 2, 2, 1, 2, 2}, Case{4, 1, 1, 4, 1, 1}}) {
    const v1::JobStatus status = Placed({Rank(0, "a", 0)}, c.tensor, c.pipeline, c.data);
    const Layout layout = LayoutOf(status);
    EXPECT_EQ(layout.nodes, 2);
    EXPECT_EQ(layout.devices_per_node, 2);
    EXPECT_EQ(layout.tensor, c.want_tensor);
    EXPECT_EQ(layout.pipeline, c.want_pipeline);
    EXPECT_EQ(layout.data, c.want_data);
    const LaunchPlan plan = PlanLaunch(status, "a", 1);
    const v1::LaunchWorkers& launch = plan.messages.at("a").launch();
    EXPECT_EQ(launch.layout().tensor(), c.want_tensor);
    EXPECT_EQ(launch.layout().pipeline(), c.want_pipeline);
    EXPECT_EQ(launch.layout().data(), c.want_data);
  }
}

TEST(LaunchPlanTest, AnEmptyPlacementLaunchesNothing) {
  const LaunchPlan plan = PlanLaunch(Placed({}, 1, 1, 1), "a", 1);
  EXPECT_EQ(plan.world_size, 0);
  EXPECT_TRUE(plan.messages.empty());
}

TEST(LaunchPlanTest, TheMasterPortIsInItsRangeAndStableForAGeneration) {
  for (int64_t generation = 1; generation <= 50; ++generation) {
    const int port = MasterPort(29500, "gpt-abc", generation);
    EXPECT_GE(port, 29500);
    EXPECT_LT(port, 30500);
    EXPECT_EQ(port, MasterPort(29500, "gpt-abc", generation));
  }
}

TEST(LaunchPlanTest, TheMasterPortAvoidsOtherJobsPortsWrappingInItsRange) {
  const int own = MasterPort(29500, "gpt-abc", 3);
  EXPECT_EQ(MasterPort(29500, "gpt-abc", 3, {}), own);
  EXPECT_EQ(MasterPort(29500, "gpt-abc", 3, {own - 1, own + 2}), own);
  const int next = own + 1 < 30500 ? own + 1 : 29500;
  EXPECT_EQ(MasterPort(29500, "gpt-abc", 3, {own}), next);
  std::set<int> all_but_one;
  for (int port = 29500; port < 30500; ++port) {
    if (port != 29700) all_but_one.insert(port);
  }
  EXPECT_EQ(MasterPort(29500, "gpt-abc", 3, all_but_one), 29700);
  all_but_one.insert(29700);  // every port taken: its own, as before
  EXPECT_EQ(MasterPort(29500, "gpt-abc", 3, all_but_one), own);
}

}  // namespace
}  // namespace ringmaster::coordinator
