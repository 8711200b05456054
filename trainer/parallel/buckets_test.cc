#include "trainer/parallel/buckets.h"

#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

struct Case {
  int64_t size;
  int dp;
  int64_t bucket;
  std::vector<std::pair<int64_t, int64_t>> want;  // (begin, end), in issue order
};

TEST(BucketsTest, PlansFromTheEndInAlignedMultiples) {
  const std::vector<Case> cases = {
      {100, 1, 0, {{0, 112}}},                        // one bucket, padded to 16
      {100, 1, 40, {{64, 112}, {16, 64}, {0, 16}}},   // 40 rounds up to 48
      {100, 2, 40, {{64, 128}, {0, 64}}},             // units of 32 for two ranks
      {200, 2, 40, {{160, 224}, {96, 160}, {32, 96}, {0, 32}}},
      {64, 4, 64, {{0, 64}}},
      {65, 4, 64, {{64, 128}, {0, 64}}},
  };
  for (const Case& c : cases) {
    std::vector<Bucket> got = PlanBuckets(c.size, c.dp, c.bucket);
    ASSERT_EQ(got.size(), c.want.size()) << c.size << " " << c.dp << " " << c.bucket;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].begin, c.want[i].first);
      EXPECT_EQ(got[i].end, c.want[i].second);
      EXPECT_EQ(got[i].size() % (c.dp * kBucketAlignment), 0);
    }
    EXPECT_EQ(got.front().end, PaddedSize(c.size, c.dp));
  }
}

TEST(BucketsTest, OwnedChunksPartitionEveryBucket) {
  std::vector<Bucket> buckets = PlanBuckets(1000, 3, 200);
  int64_t covered = 0;
  for (int r = 0; r < 3; ++r) {
    std::vector<FlatRange> owned = OwnedRanges(buckets, r, 3);
    ASSERT_EQ(owned.size(), buckets.size());
    for (size_t i = 1; i < owned.size(); ++i) EXPECT_LT(owned[i - 1].offset, owned[i].offset);
    for (const FlatRange& o : owned) covered += o.size;
  }
  EXPECT_EQ(covered, PaddedSize(1000, 3));
  EXPECT_EQ(OwnedChunk({96, 192}, 2, 3).offset, 160);
  EXPECT_EQ(OwnedChunk({96, 192}, 2, 3).size, 32);
}

}  // namespace
}  // namespace ringmaster::trainer
