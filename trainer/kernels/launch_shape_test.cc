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

TEST(LaunchShapeTest, RowsVectorizableNeedsAlignedPointersAndWholeVectorRows) {
  alignas(16) static char buffer[64];
  EXPECT_TRUE(RowsVectorizable(8, 2, {buffer, buffer + 16}));  // 8 bf16 = one vector
  EXPECT_TRUE(RowsVectorizable(768, 2, {buffer, nullptr}));    // null pointers are not used
  EXPECT_TRUE(RowsVectorizable(4, 4, {}));
  EXPECT_FALSE(RowsVectorizable(12, 2, {buffer}));  // 24 bytes: the second row starts unaligned
  EXPECT_FALSE(RowsVectorizable(6, 4, {buffer}));
  EXPECT_FALSE(RowsVectorizable(8, 2, {buffer, buffer + 2}));
  EXPECT_FALSE(RowsVectorizable(8, 2, {buffer + 8}));
}

TEST(LaunchShapeTest, WarpRowChunksRoundUpToACompiledVariant) {
  // bf16: 256 elements per chunk (32 lanes x 8); fp32: 128.
  EXPECT_EQ(WarpRowChunks(1, 2), 1);
  EXPECT_EQ(WarpRowChunks(256, 2), 1);
  EXPECT_EQ(WarpRowChunks(257, 2), 2);
  EXPECT_EQ(WarpRowChunks(768, 2), 4);   // GPT-2's width: 3 chunks, the 4-chunk variant
  EXPECT_EQ(WarpRowChunks(1024, 2), 4);  // T = 1024 in attention
  EXPECT_EQ(WarpRowChunks(768, 4), 8);
  EXPECT_EQ(WarpRowChunks(2048, 2), kMaxWarpRowChunks);
  EXPECT_EQ(WarpRowChunks(2049, 2), 0);
  EXPECT_EQ(WarpRowChunks(1025, 4), 0);
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
