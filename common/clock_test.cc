#include "common/clock.h"

#include "gtest/gtest.h"

namespace ringmaster {
namespace {

// Setting the system clock, which is what the steady clock exists to ignore, cannot be done in a
// test; these check what can: it reads as wall time and never goes back.
TEST(SteadyClockTest, ReadsAsWallTimeWhenFirstUsed) {
  const absl::Time before = absl::Now();
  const absl::Time steady = Clock::Steady()->Now();
  const absl::Time after = absl::Now();
  EXPECT_GE(steady, before);
  // Its start was read a moment before the wall time it adds the elapsed time to.
  EXPECT_LE(steady, after + absl::Seconds(1));
}

TEST(SteadyClockTest, NeverGoesBack) {
  absl::Time last = Clock::Steady()->Now();
  for (int i = 0; i < 100000; ++i) {
    const absl::Time now = Clock::Steady()->Now();
    ASSERT_GE(now, last) << "read " << i;
    last = now;
  }
}

TEST(SteadyClockTest, AdvancesAsWallTimeDoes) {
  // The steady readings enclose the wall ones, so (the system clock not being set meanwhile) the
  // steady clock moves at least as far: a clock that stood still would not.
  const absl::Time steady_before = Clock::Steady()->Now();
  const absl::Time wall_before = absl::Now();
  absl::Time wall_after = wall_before;
  while (wall_after - wall_before < absl::Milliseconds(20)) wall_after = absl::Now();
  const absl::Time steady_after = Clock::Steady()->Now();
  EXPECT_GE(steady_after - steady_before, wall_after - wall_before - absl::Microseconds(1));
}

TEST(SteadyClockTest, IsOneClockForTheProcess) {
  EXPECT_EQ(Clock::Steady(), Clock::Steady());
  EXPECT_NE(Clock::Steady(), Clock::Real());
}

TEST(FakeClockTest, MovesOnlyWhenAdvanced) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  EXPECT_EQ(clock.Now(), start);
  clock.Advance(absl::Seconds(3));
  EXPECT_EQ(clock.Now(), start + absl::Seconds(3));
}

}  // namespace
}  // namespace ringmaster
