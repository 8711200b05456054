#include "spec/elastic.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

TEST(ElasticTest, PerReplicaKeepsEachReplicasBatchAndScalesTheLearningRate) {
  v1::JobSpec spec = Builtin(4, 1, 2, 8);
  EXPECT_FALSE(KeepsPerReplicaBatch(spec));
  EXPECT_STREQ(ElasticBatchName(spec), "global");
  EXPECT_EQ(Accumulation(spec, 4, 2), 2);
  EXPECT_DOUBLE_EQ(LrScale(spec, 4, 2), 1.0);
  spec.set_elastic_batch(v1::ELASTIC_BATCH_PER_REPLICA);
  EXPECT_TRUE(KeepsPerReplicaBatch(spec));
  EXPECT_STREQ(ElasticBatchName(spec), "per_replica");
  // The full size's 8 / (2 * 4) = 1 micro-batch at every degree; the learning rate follows DP.
  EXPECT_EQ(Accumulation(spec, 4, 2), 1);
  EXPECT_EQ(Accumulation(spec, 4, 1), 1);
  EXPECT_DOUBLE_EQ(LrScale(spec, 4, 2), 0.5);
  EXPECT_DOUBLE_EQ(LrScale(spec, 4, 1), 0.25);
  EXPECT_DOUBLE_EQ(LrScale(spec, 4, 4), 1.0);
  // Global batch 8 with micro 2 leaves DP 3 unreachable in global mode, not per replica.
  EXPECT_THAT(NodesOf(ReachableSizes(spec, 4)), ::testing::ElementsAre(4, 3, 2, 1));
  v1::JobSpec command = Command(6, 1);
  command.set_elastic_batch(v1::ELASTIC_BATCH_PER_REPLICA);
  EXPECT_EQ(Accumulation(command, 6, 4), 1);
  EXPECT_DOUBLE_EQ(LrScale(command, 6, 4), 4.0 / 6.0);
  EXPECT_THAT(NodesOf(ReachableSizes(command, 6)), ::testing::ElementsAre(6, 5, 4, 3, 2, 1));
}

TEST(ElasticTest, WarmupDefaultsToTheOptimizersAndZeroForACommand) {
  v1::JobSpec spec = Builtin(4, 1, 2, 8);
  spec.mutable_trainer()->mutable_optimizer()->set_warmup_steps(7);
  EXPECT_EQ(ElasticWarmupSteps(spec), 7);
  spec.set_elastic_warmup_steps(0);
  EXPECT_EQ(ElasticWarmupSteps(spec), 0);
  spec.set_elastic_warmup_steps(30);
  EXPECT_EQ(ElasticWarmupSteps(spec), 30);
  EXPECT_EQ(ElasticWarmupSteps(Command(4, 1)), 0);
}

// ElasticKeyProblems as "field: rule" lines, as ValidateJobSpec reports them.
std::string Problems(const v1::JobSpec& spec) {
  std::vector<std::string> lines;
  for (const auto& [field, rule] : ElasticKeyProblems(spec)) {
    lines.push_back(absl::StrCat(field, ": ", rule));
  }
  return absl::StrJoin(lines, "\n");
}

TEST(ElasticTest, BadElasticKeysAreNamed) {
  v1::JobSpec spec = Builtin(4, 1, 2, 8);
  EXPECT_EQ(Problems(spec), "");
  spec.set_elastic_batch(static_cast<v1::ElasticBatch>(9));
  spec.set_elastic_warmup_steps(-1);
  spec.set_elastic_wait_seconds(-2);
  EXPECT_EQ(ElasticKeyProblems(spec).size(), 3u);
  const std::string s = Problems(spec);
  EXPECT_THAT(s, HasSubstr("elastic_batch: must be global or per_replica, got 9"));
  EXPECT_THAT(s, HasSubstr("elastic_warmup_steps: must be in [0, 1000000000], got -1"));
  EXPECT_THAT(s, HasSubstr("elastic_wait_seconds: must be a number of seconds in "
                           "[0, 86400], got -2"));
  spec.set_elastic_batch(v1::ELASTIC_BATCH_GLOBAL);
  spec.set_elastic_warmup_steps(5);
  spec.set_elastic_wait_seconds(std::nan(""));
  EXPECT_THAT(Problems(spec), HasSubstr("elastic_wait_seconds"));
  spec.set_elastic_wait_seconds(86401);
  EXPECT_THAT(Problems(spec), HasSubstr("got 86401"));
  spec.set_elastic_wait_seconds(30);
  EXPECT_EQ(Problems(spec), "");
}

}  // namespace
}  // namespace ringmaster::spec
