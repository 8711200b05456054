#include "trainer/cuda/collective_buffers.h"

#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

alignas(256) char memory[4096];

ByteRange At(size_t offset, size_t bytes) { return ByteRange{memory + offset, bytes}; }

TEST(CollectiveBuffersTest, DisjointBuffersAreAlwaysFine) {
  for (CollectiveOp op : {CollectiveOp::kAllReduce, CollectiveOp::kReduceScatter,
                          CollectiveOp::kAllGather, CollectiveOp::kBroadcast}) {
    EXPECT_TRUE(CheckAliasing(op, At(0, 64), At(64, 64), 1).ok());
    EXPECT_TRUE(CheckAliasing(op, At(0, 64), ByteRange{}, 1).ok());
  }
  EXPECT_TRUE(CheckAliasing(CollectiveOp::kSend, At(0, 64), ByteRange{}, 0).ok());
}

TEST(CollectiveBuffersTest, InPlaceLayoutsNcclAllows) {
  EXPECT_TRUE(CheckAliasing(CollectiveOp::kAllReduce, At(0, 64), At(0, 64), 3).ok());
  EXPECT_TRUE(CheckAliasing(CollectiveOp::kBroadcast, At(0, 64), At(0, 64), 3).ok());
  // 4 ranks, 16-byte chunks: rank 2's chunk starts 32 bytes in.
  EXPECT_TRUE(CheckAliasing(CollectiveOp::kReduceScatter, At(0, 64), At(32, 16), 2).ok());
  EXPECT_TRUE(CheckAliasing(CollectiveOp::kAllGather, At(32, 16), At(0, 64), 2).ok());
}

TEST(CollectiveBuffersTest, OtherOverlapsAreProgrammingErrors) {
  EXPECT_EQ(CheckAliasing(CollectiveOp::kAllReduce, At(0, 64), At(16, 64), 0).code(),
            absl::StatusCode::kInvalidArgument);
  // Rank 1's chunk in rank 2's place.
  EXPECT_EQ(CheckAliasing(CollectiveOp::kReduceScatter, At(0, 64), At(16, 16), 2).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckAliasing(CollectiveOp::kAllGather, At(16, 16), At(0, 64), 2).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckAliasing(CollectiveOp::kSend, At(0, 64), At(0, 64), 0).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CollectiveBuffersTest, StagingKeepsInPlaceRelations) {
  // All-reduce in place: one region.
  StagingPlan p = PlanStaging(At(0, 64), At(0, 64));
  EXPECT_EQ(p.bytes, 64u);
  EXPECT_EQ(p.in_offset, 0u);
  EXPECT_EQ(p.out_offset, 0u);
  // All-gather in place, rank 2 of 4: the input sits 32 bytes into the output.
  p = PlanStaging(At(32, 16), At(0, 64));
  EXPECT_EQ(p.bytes, 64u);
  EXPECT_EQ(p.in_offset, 32u);
  EXPECT_EQ(p.out_offset, 0u);
  // Reduce-scatter in place: the output sits inside the input.
  p = PlanStaging(At(0, 64), At(48, 16));
  EXPECT_EQ(p.bytes, 64u);
  EXPECT_EQ(p.in_offset, 0u);
  EXPECT_EQ(p.out_offset, 48u);
}

TEST(CollectiveBuffersTest, StagingOfSeparateBuffers) {
  StagingPlan p = PlanStaging(At(1000, 8), At(0, 100));
  EXPECT_EQ(p.in_offset, 0u);
  EXPECT_EQ(p.out_offset, 256u);  // aligned
  EXPECT_EQ(p.bytes, 356u);
  p = PlanStaging(At(0, 40), ByteRange{});  // send
  EXPECT_EQ(p.bytes, 40u);
  p = PlanStaging(ByteRange{}, At(0, 24));  // recv
  EXPECT_EQ(p.bytes, 24u);
  EXPECT_EQ(p.out_offset, 0u);
  EXPECT_EQ(PlanStaging(ByteRange{}, ByteRange{}).bytes, 0u);
}

}  // namespace
}  // namespace ringmaster::trainer
