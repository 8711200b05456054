#include "trainer/model/random.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

TEST(RngTest, SameSeedSameStreamAndStateRoundTrips) {
  Rng a(42), b(42);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.NextU64(), b.NextU64());
  auto state = a.state();
  const uint64_t next = a.NextU64();
  Rng c(1);
  c.set_state(state);
  EXPECT_EQ(c.NextU64(), next);
  EXPECT_NE(Rng(1).NextU64(), Rng(2).NextU64());
}

TEST(RngTest, KnownFirstValueKeepsTheStreamStableAcrossBuilds) {
  // Pinned: data order and initialisation depend on this stream never changing.
  EXPECT_EQ(Rng(0).NextU64(), 0x99ec5f36cb75f2b4ULL);
}

TEST(RngTest, NormalHasUnitMomentsAndBelowIsInRange) {
  Rng rng(9);
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = rng.NextNormal();
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.01);
  std::vector<int> counts(7);
  for (int i = 0; i < 70000; ++i) counts[rng.Below(7)]++;
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
}

TEST(RngTest, DerivedSeedsDiffer) {
  EXPECT_NE(DeriveSeed(1, 0), DeriveSeed(1, 1));
  EXPECT_NE(DeriveSeed(1, 0), DeriveSeed(2, 0));
  EXPECT_EQ(DeriveSeed(3, 4), DeriveSeed(3, 4));
}

}  // namespace
}  // namespace ringmaster::trainer
