#include "agent/working_rank.h"

#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

// A report of the Python watch: `cpu` seconds of its training thread so far; `blocked` in a
// collective; `pending`: world's #4 entered and not completed.
v1::ReportCollectivesRequest Report(double cpu, bool blocked = false, bool pending = false) {
  v1::ReportCollectivesRequest r;
  (*r.mutable_collective_entered())["world"] = 4;
  (*r.mutable_collective_completed())["world"] = pending ? 3 : 4;
  r.set_blocked(blocked);
  r.set_blocked_known(true);
  r.set_thread_cpu_seconds(cpu);
  return r;
}

// Reports once a second from kStart for `seconds` seconds, the thread using `share` of each.
absl::Time Feed(WorkingRank* rank, int seconds, double share, double cpu = 50) {
  for (int i = 0; i <= seconds; ++i) {
    rank->Heard(kStart + absl::Seconds(i), Report(cpu + i * share));
  }
  return kStart + absl::Seconds(seconds);
}

TEST(WorkingRankTest, AThreadThatRunsOutsideAnyCollectiveIsWorking) {
  WorkingRank rank;
  const absl::Time last = Feed(&rank, 5, 0.5);
  EXPECT_TRUE(rank.Working(last));
  EXPECT_TRUE(rank.Working(last + WorkingRank::kStale));
}

TEST(WorkingRankTest, AThreadThatDoesNotRunIsStuckNotWorking) {
  WorkingRank rank;
  EXPECT_FALSE(rank.Working(Feed(&rank, 5, 0.0)));
  WorkingRank idle;  // A poll loop: 5% of a core.
  EXPECT_FALSE(idle.Working(Feed(&idle, 5, 0.05)));
}

TEST(WorkingRankTest, AThreadThatStopsRunningStopsWorkingWithinTheWindow) {
  WorkingRank rank;
  absl::Time now = Feed(&rank, 5, 1.0);
  ASSERT_TRUE(rank.Working(now));
  const double cpu = 55;  // Stuck from here on: its CPU does not move.
  int seconds = 0;
  while (rank.Working(now) && seconds < 10) {
    now += absl::Seconds(1);
    rank.Heard(now, Report(cpu));
    ++seconds;
  }
  EXPECT_FALSE(rank.Working(now));
  // Once the reports of the last kWindow hold under a tenth of it in CPU: within the window.
  EXPECT_LE(seconds, absl::ToInt64Seconds(WorkingRank::kWindow));
  EXPECT_GE(seconds, 2);  // A pause of a second is still work.
}

TEST(WorkingRankTest, BlockedOrInsideACollectiveIsNotWorking) {
  WorkingRank rank;
  absl::Time now = Feed(&rank, 5, 1.0);
  rank.Heard(now + absl::Seconds(1), Report(57, /*blocked=*/true));
  EXPECT_FALSE(rank.Working(now + absl::Seconds(1)));
  rank.Heard(now + absl::Seconds(2), Report(58, false, /*pending=*/true));
  EXPECT_FALSE(rank.Working(now + absl::Seconds(2)));
  rank.Heard(now + absl::Seconds(3), Report(59));
  EXPECT_TRUE(rank.Working(now + absl::Seconds(3)));
}

TEST(WorkingRankTest, NeedsTheWatchsWordAndTheCpuAndRecentReports) {
  WorkingRank rank;
  v1::ReportCollectivesRequest unknown = Report(10);
  unknown.set_blocked_known(false);  // the builtin trainer's: `blocked` means nothing
  rank.Heard(kStart, unknown);
  unknown.set_thread_cpu_seconds(12);
  rank.Heard(kStart + absl::Seconds(2), unknown);
  EXPECT_FALSE(rank.Working(kStart + absl::Seconds(2)));

  WorkingRank no_cpu;
  for (int i = 0; i <= 4; ++i) no_cpu.Heard(kStart + absl::Seconds(i), Report(0));
  EXPECT_FALSE(no_cpu.Working(kStart + absl::Seconds(4)));

  WorkingRank silent;  // A frozen side thread says nothing more: its word goes stale.
  const absl::Time last = Feed(&silent, 4, 1.0);
  EXPECT_FALSE(silent.Working(last + WorkingRank::kStale + absl::Seconds(1)));

  WorkingRank short_span;  // Two reports 1 s apart say too little.
  short_span.Heard(kStart, Report(10));
  short_span.Heard(kStart + absl::Seconds(1), Report(11));
  EXPECT_FALSE(short_span.Working(kStart + absl::Seconds(1)));
}

TEST(WorkingRankTest, AReportWithoutCpuOrWithLessStartsTheWindowOver) {
  WorkingRank rank;
  absl::Time now = Feed(&rank, 5, 1.0);
  now += absl::Seconds(1);
  rank.Heard(now, Report(0.2));  // another process's thread (a shell's second program)
  EXPECT_FALSE(rank.Working(now));
  for (int i = 1; i <= 2; ++i) rank.Heard(now + absl::Seconds(i), Report(0.2 + i));
  EXPECT_TRUE(rank.Working(now + absl::Seconds(2)));
  rank.Heard(now + absl::Seconds(3), Report(0));  // unknown now
  EXPECT_FALSE(rank.Working(now + absl::Seconds(3)));
  rank.Reset();
  EXPECT_FALSE(rank.Working(now + absl::Seconds(3)));
}

}  // namespace
}  // namespace ringmaster::agent
