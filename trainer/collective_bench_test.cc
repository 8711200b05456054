#include "trainer/collective_bench.h"

#include "gtest/gtest.h"
#include "trainer/comm/testing.h"

namespace ringmaster::trainer {
namespace {

TEST(CollectiveBenchTest, SweepChecksTheDataOnThreeRanks) {
  InMemoryStore store;
  std::vector<std::vector<CollectiveBenchRow>> rows(3);
  auto statuses = testing::RunRanks(3, [&](int rank) -> absl::Status {
    auto comm = testing::ConnectLoopback("bench", rank, 3, &store);
    if (!comm.ok()) return comm.status();
    CollectiveBenchOptions options;
    options.min_bytes = 64;
    options.max_bytes = 1 << 16;
    options.factor = 8;
    options.warmup = 1;
    options.iters = 2;
    auto result = RunCollectiveBench(**comm, options);
    if (!result.ok()) return result.status();
    rows[rank] = *result;
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(rows[0].size(), 5u * 4);  // 5 ops x sizes 64, 512, 4096, 32768 bytes
  for (const CollectiveBenchRow& row : rows[0]) {
    EXPECT_EQ(row.wrong, 0) << row.op;
    EXPECT_GT(row.algbw, 0) << row.op;
    EXPECT_EQ(row.count % 3, 0);
  }
  // Every rank computed the same aggregated figures.
  EXPECT_EQ(rows[0][4].seconds, rows[2][4].seconds);
}

}  // namespace
}  // namespace ringmaster::trainer
