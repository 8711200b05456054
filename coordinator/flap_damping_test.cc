// FlapHistory and SettleHold: which losses count, the doubling hold, its cap and its decay.
#include "coordinator/flap_damping.h"

#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

FlapDamping Damping() { return {absl::Minutes(30), absl::Minutes(1)}; }

TEST(SettleHoldTest, DoublesFromTheSecondLossUpToTheWindow) {
  const struct {
    int losses;
    absl::Duration hold;
  } cases[] = {
      {0, absl::ZeroDuration()}, {1, absl::ZeroDuration()}, {2, absl::Minutes(1)},
      {3, absl::Minutes(2)},     {4, absl::Minutes(4)},     {6, absl::Minutes(16)},
      {7, absl::Minutes(30)},    {64, absl::Minutes(30)},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(SettleHold(c.losses, Damping()), c.hold) << c.losses << " losses";
  }
}

TEST(SettleHoldTest, IsNeverLongerThanTheWindow) {
  EXPECT_EQ(SettleHold(2, {absl::Minutes(30), absl::Minutes(30)}), absl::Minutes(30));
  EXPECT_EQ(SettleHold(40, {absl::Seconds(10), absl::Seconds(3)}), absl::Seconds(10));
  EXPECT_EQ(SettleHold(2, {absl::Minutes(1), absl::Minutes(5)}), absl::Minutes(1));
}

TEST(SettleHoldTest, AZeroHoldTurnsDampingOff) {
  EXPECT_EQ(SettleHold(10, {absl::Minutes(30), absl::ZeroDuration()}), absl::ZeroDuration());
}

TEST(FlapHistoryTest, OneLossIsNotAFlap) {
  FlapHistory h;
  h.Registered(kStart);
  h.Lost(kStart + absl::Minutes(1), Damping());
  h.Registered(kStart + absl::Minutes(2));
  EXPECT_EQ(h.RecentLosses(kStart + absl::Minutes(2), Damping()), 1);
  EXPECT_FALSE(h.SettlingUntil(kStart + absl::Minutes(2), Damping()).has_value());
}

TEST(FlapHistoryTest, ASecondLossHoldsTheNodeAfterItsRegistration) {
  FlapHistory h;
  h.Registered(kStart);
  h.Lost(kStart + absl::Minutes(1), Damping());
  h.Registered(kStart + absl::Minutes(2));
  h.Lost(kStart + absl::Minutes(3), Damping());
  const absl::Time back = kStart + absl::Minutes(4);
  h.Registered(back);
  EXPECT_EQ(h.SettlingUntil(back, Damping()), back + absl::Minutes(1));
  EXPECT_EQ(h.SettlingUntil(back + absl::Seconds(59), Damping()), back + absl::Minutes(1));
  EXPECT_FALSE(h.SettlingUntil(back + absl::Minutes(1), Damping()).has_value());
  // A third loss doubles it.
  h.Lost(back + absl::Minutes(2), Damping());
  h.Registered(back + absl::Minutes(3));
  EXPECT_EQ(h.SettlingUntil(back + absl::Minutes(3), Damping()), back + absl::Minutes(5));
}

TEST(FlapHistoryTest, LossesAgeOutOfTheWindow) {
  FlapHistory h;
  for (int i = 0; i < 4; ++i) h.Lost(kStart + absl::Minutes(i), Damping());
  const absl::Time back = kStart + absl::Minutes(10);
  h.Registered(back);
  EXPECT_EQ(h.RecentLosses(back, Damping()), 4);
  EXPECT_EQ(h.SettlingUntil(back, Damping()), back + absl::Minutes(4));
  EXPECT_EQ(h.SettlingUntil(back + absl::Minutes(3), Damping()), back + absl::Minutes(4));
  // Just over 30 min after the first two losses only two are left: the hold is 1 min, over.
  const absl::Time later = kStart + absl::Minutes(31) + absl::Seconds(1);
  EXPECT_EQ(h.RecentLosses(later, Damping()), 2);
  EXPECT_FALSE(h.SettlingUntil(later, Damping()).has_value());
  EXPECT_EQ(h.RecentLosses(kStart + absl::Minutes(34), Damping()), 0);
}

TEST(FlapHistoryTest, KeepsABoundedHistoryInOrder) {
  FlapHistory h;
  for (int i = 0; i < 1000; ++i) h.Lost(kStart + absl::Milliseconds(i), Damping());
  h.Lost(kStart - absl::Seconds(1), Damping());  // late, out of order: kept in order
  EXPECT_EQ(h.RecentLosses(kStart + absl::Seconds(1), Damping()), FlapHistory::kMaxLosses);
  EXPECT_FALSE(h.SettlingUntil(kStart + absl::Seconds(1), Damping()).has_value());  // unregistered
  h.Registered(kStart + absl::Seconds(1));
  EXPECT_EQ(h.SettlingUntil(kStart + absl::Seconds(1), Damping()),
            kStart + absl::Seconds(1) + absl::Minutes(30));
}

}  // namespace
}  // namespace ringmaster::coordinator
