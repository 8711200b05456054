#include "spec/elastic.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::spec {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Builtin(int nodes, int min_nodes, int micro, int global) {
  v1::JobSpec spec;
  spec.set_nodes(nodes);
  spec.set_min_nodes(min_nodes);
  spec.set_devices_per_node(1);
  spec.mutable_trainer()->set_builtin("gpt");
  spec.mutable_trainer()->mutable_batch()->set_micro_batch(micro);
  spec.mutable_trainer()->mutable_batch()->set_global_batch(global);
  return spec;
}

v1::JobSpec Command(int nodes, int min_nodes) {
  v1::JobSpec spec;
  spec.set_nodes(nodes);
  spec.set_min_nodes(min_nodes);
  spec.mutable_trainer()->mutable_command()->add_argv("python3");
  return spec;
}

std::vector<int> NodesOf(const std::vector<ElasticSize>& sizes) {
  std::vector<int> nodes;
  for (const ElasticSize& s : sizes) nodes.push_back(s.nodes);
  return nodes;
}

TEST(ElasticTest, MinNodesDefaultsToNodes) {
  EXPECT_EQ(MinNodes(Builtin(4, 0, 2, 8)), 4);
  EXPECT_EQ(MinNodes(Builtin(4, 2, 2, 8)), 2);
}

TEST(ElasticTest, OnlyWholeDegreesDividingTheGlobalBatchAreReachable) {
  // DP 4 on 4 nodes, global 8 with micro 2: 3 nodes give DP 3 (8 % 6), unreachable.
  const auto sizes = ReachableSizes(Builtin(4, 1, 2, 8), 4);
  EXPECT_THAT(NodesOf(sizes), ::testing::ElementsAre(4, 2, 1));
  EXPECT_EQ(sizes[0].data, 4);
  EXPECT_EQ(sizes[0].accumulation, 1);
  EXPECT_EQ(sizes[1].data, 2);
  EXPECT_EQ(sizes[1].accumulation, 2);
  EXPECT_EQ(sizes[2].data, 1);
  EXPECT_EQ(sizes[2].accumulation, 4);
  EXPECT_EQ(DescribeSizes(sizes),
            "4 nodes (DP 4, accumulation 1), 2 nodes (DP 2, accumulation 2), 1 node (DP 1, "
            "accumulation 4)");
  // Global 24: DP 3 (24 / 6 = 4 micro-batches) is reachable for the builtin trainer.
  EXPECT_THAT(NodesOf(ReachableSizes(Builtin(4, 2, 2, 24), 4)), ::testing::ElementsAre(4, 3, 2));
}

TEST(ElasticTest, TheDegreeScalesWithTheNodesOnly) {
  // 4 nodes with DP 2 (TP or PP across the rest): 3 nodes would be DP 1.5, 2 nodes DP 1.
  EXPECT_THAT(NodesOf(ReachableSizes(Builtin(4, 1, 1, 8), 2)), ::testing::ElementsAre(4, 2));
  // 8 devices per node, TP 8: DP = nodes.
  EXPECT_THAT(NodesOf(ReachableSizes(Builtin(3, 1, 1, 6), 3)), ::testing::ElementsAre(3, 2, 1));
}

TEST(ElasticTest, ACommandJobsDegreeMustDivideTheFullOne) {
  const auto sizes = ReachableSizes(Command(4, 1), 4);
  EXPECT_THAT(NodesOf(sizes), ::testing::ElementsAre(4, 2, 1));
  EXPECT_EQ(sizes[1].accumulation, 2);
  EXPECT_EQ(Accumulation(Command(6, 1), 6, 4), 0);
}

TEST(ElasticTest, NotElasticIsOnlyItsOwnSize) {
  EXPECT_THAT(NodesOf(ReachableSizes(Builtin(4, 0, 2, 8), 4)), ::testing::ElementsAre(4));
  EXPECT_TRUE(CheckReachable(Builtin(4, 0, 2, 8), 4).ok());
}

TEST(ElasticTest, AnUnreachableMinimumNamesMinNodes) {
  // DP 4 on 4 nodes down to 3: DP 3 does not divide 8 with micro 2.
  const absl::Status s = CheckReachable(Builtin(4, 3, 2, 8), 4);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("min_nodes: must leave a size below nodes reachable"));
  EXPECT_THAT(s.message(), HasSubstr("no size in [3, 3] nodes"));
  EXPECT_THAT(s.message(), HasSubstr("global_batch (8) with micro_batch (2), got 3"));
  EXPECT_TRUE(CheckReachable(Builtin(4, 2, 2, 8), 4).ok());
  const absl::Status c = CheckReachable(Command(6, 4), 6);
  EXPECT_THAT(c.message(),
              HasSubstr("no size in [4, 5] nodes is it a whole number dividing the full"));
}

}  // namespace
}  // namespace ringmaster::spec
