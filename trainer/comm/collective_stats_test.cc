#include "trainer/comm/collective_stats.h"

#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

TEST(CollectiveStatsTest, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveOp::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveOp::kAllGather, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveOp::kReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveOp::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveOp::kAllReduce, 1), 0.0);
}

TEST(CollectiveStatsTest, TotalsAccumulatePerOperation) {
  CollectiveTotals t;
  t.Add(CollectiveOp::kAllGather, 100, 0.5);
  t.Add(CollectiveOp::kAllReduce, 10, 1.0);
  t.Add(CollectiveOp::kAllReduce, 30, 1.0);
  auto nz = t.NonZero();
  ASSERT_EQ(nz.size(), 2u);
  EXPECT_EQ(nz[0].op, CollectiveOp::kAllReduce);
  EXPECT_EQ(nz[0].count, 2);
  EXPECT_DOUBLE_EQ(nz[0].algbw(), 20.0);
  EXPECT_DOUBLE_EQ(nz[1].algbw(), 200.0);
  EXPECT_STREQ(CollectiveOpName(nz[1].op), "all_gather");
  t.Clear();
  EXPECT_TRUE(t.NonZero().empty());
}

}  // namespace
}  // namespace ringmaster::trainer
