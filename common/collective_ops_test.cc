// The reportable collective ops and their nccl-tests bus-bandwidth factors.
#include "common/collective_ops.h"

#include <string>

#include "gtest/gtest.h"

namespace ringmaster {
namespace {

TEST(CollectiveOpsTest, TheTrainersOpsComeFirstInTheirOrder) {
  for (size_t i = 0; i < kCollectiveOpNames.size(); ++i) {
    EXPECT_STREQ(kReportableCollectiveOpNames[i], kCollectiveOpNames[i]) << i;
  }
}

TEST(CollectiveOpsTest, EveryReportableOpHasAFactor) {
  for (const char* op : kReportableCollectiveOpNames) {
    EXPECT_TRUE(IsReportableCollectiveOp(op)) << op;
    EXPECT_TRUE(CollectiveBusBandwidthFactor(op, 4).has_value()) << op;
  }
  EXPECT_FALSE(IsReportableCollectiveOp("alltoall"));
  EXPECT_FALSE(CollectiveBusBandwidthFactor("alltoall", 4).has_value());
  EXPECT_FALSE(CollectiveBusBandwidthFactor("all_reduce", 0).has_value());
}

TEST(CollectiveOpsTest, NcclTestsFactors) {
  EXPECT_DOUBLE_EQ(*CollectiveBusBandwidthFactor("all_reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(*CollectiveBusBandwidthFactor("all_gather", 4), 0.75);
  EXPECT_DOUBLE_EQ(*CollectiveBusBandwidthFactor("reduce_scatter", 4), 0.75);
  EXPECT_DOUBLE_EQ(*CollectiveBusBandwidthFactor("gather", 4), 0.75);
  EXPECT_DOUBLE_EQ(*CollectiveBusBandwidthFactor("scatter", 4), 0.75);
  EXPECT_DOUBLE_EQ(*CollectiveBusBandwidthFactor("all_to_all", 4), 0.75);
  EXPECT_DOUBLE_EQ(*CollectiveBusBandwidthFactor("broadcast", 4), 1);
  EXPECT_DOUBLE_EQ(*CollectiveBusBandwidthFactor("reduce", 4), 1);
  EXPECT_DOUBLE_EQ(*CollectiveBusBandwidthFactor("send", 4), 1);
  EXPECT_DOUBLE_EQ(*CollectiveBusBandwidthFactor("recv", 4), 1);
  EXPECT_DOUBLE_EQ(*CollectiveBusBandwidthFactor("barrier", 4), 0);
  // One rank moves nothing over the bus.
  EXPECT_DOUBLE_EQ(*CollectiveBusBandwidthFactor("all_reduce", 1), 0);
}

}  // namespace
}  // namespace ringmaster
