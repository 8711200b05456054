#include "trainer/kernels/launch_shape.h"

#include "gtest/gtest.h"

namespace ringmaster::kernels {
namespace {

TEST(LaunchShapeTest, GridStrideBlocks) {
  EXPECT_EQ(GridStrideBlocks(0, 256), 1);  // an empty launch still has a valid grid
  EXPECT_EQ(GridStrideBlocks(1, 256), 1);
  EXPECT_EQ(GridStrideBlocks(256, 256), 1);
  EXPECT_EQ(GridStrideBlocks(257, 256), 2);
  EXPECT_EQ(GridStrideBlocks(int64_t{kMaxGridStrideBlocks} * 256, 256), kMaxGridStrideBlocks);
  EXPECT_EQ(GridStrideBlocks(int64_t{1} << 40, 256), kMaxGridStrideBlocks);
}

TEST(LaunchShapeTest, WarpPerRowBlocksCoverEveryRow) {
  for (int64_t rows : {1, 7, 8, 9, 8192, 196608}) {
    const int64_t blocks = WarpPerRowBlocks(rows, 8);
    EXPECT_GE(blocks * 8, rows);
    EXPECT_LT((blocks - 1) * 8, rows);
  }
  EXPECT_EQ(WarpPerRowBlocks(0, 8), 1);
}

TEST(LaunchShapeTest, ColumnReduceSplits) {
  EXPECT_EQ(ColumnReduceSplits(1), 1);
  EXPECT_EQ(ColumnReduceSplits(256), 1);
  EXPECT_EQ(ColumnReduceSplits(257), 2);
  EXPECT_EQ(ColumnReduceSplits(16384), 64);
  EXPECT_EQ(ColumnReduceSplits(1 << 20), kMaxColumnSplits);
  EXPECT_EQ(ColumnReduceScratch(768, 64), 768 * 64);
}

TEST(LaunchShapeTest, SumSquaresBlocks) {
  EXPECT_EQ(SumSquaresBlocks(0), 1);
  EXPECT_EQ(SumSquaresBlocks(4096), 1);
  EXPECT_EQ(SumSquaresBlocks(4097), 2);
  EXPECT_EQ(SumSquaresBlocks(int64_t{124} << 20), kMaxSumSquaresBlocks);
}

}  // namespace
}  // namespace ringmaster::kernels
