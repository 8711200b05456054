#include "agent/local_watchdog.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

WatchdogOptions Options() {
  WatchdogOptions o;
  o.init_timeout = absl::Minutes(10);
  o.checkpoint_timeout = absl::Minutes(30);
  o.step_floor = absl::Minutes(2);
  o.step_factor = 10;
  o.step_window = 100;
  return o;
}

class LocalWatchdogTest : public ::testing::Test {
 protected:
  // Reports `n` steps of `seconds` each, without moving the clock.
  void Steps(int n, double seconds, int rank = 0, int64_t generation = 1) {
    for (int i = 0; i < n; ++i) {
      watchdog_.Report("gpt-1", generation, rank, v1::WORKER_PHASE_STEP, seconds);
    }
  }

  // A collectives report of (job, generation, rank).
  void Collectives(const std::string& job, int64_t generation, int rank,
                   const std::map<std::string, int64_t>& entered,
                   const std::map<std::string, int64_t>& completed, bool blocked,
                   double timeout_seconds = 0) {
    v1::ReportCollectivesRequest report;
    report.mutable_worker()->set_job_id(job);
    report.mutable_worker()->set_generation(generation);
    report.mutable_worker()->set_rank(rank);
    report.mutable_collective_entered()->insert(entered.begin(), entered.end());
    report.mutable_collective_completed()->insert(completed.begin(), completed.end());
    report.set_blocked(blocked);
    report.set_timeout_seconds(timeout_seconds);
    watchdog_.Collectives(report);
  }

  // The Python watch's report of `rank` of job "torch", generation 1: world's numbers, whether
  // it is blocked, blocked_known, and torch's default timeout (30 min).
  void Watch(int rank, int64_t entered, int64_t completed, bool blocked) {
    v1::ReportCollectivesRequest report;
    report.mutable_worker()->set_job_id("torch");
    report.mutable_worker()->set_generation(1);
    report.mutable_worker()->set_rank(rank);
    (*report.mutable_collective_entered())["world"] = entered;
    (*report.mutable_collective_completed())["world"] = completed;
    report.set_blocked(blocked);
    report.set_blocked_known(true);
    report.set_timeout_seconds(1800);
    watchdog_.Collectives(report);
  }
  // `seconds` of the side thread's reports, one a second, each as `report` says for that second;
  // returns the ranks Check() found hung meanwhile (checked every second).
  std::vector<int> Seconds(int seconds, const std::function<void(int)>& report) {
    std::vector<int> hung;
    for (int s = 0; s < seconds; ++s) {
      clock_.Advance(absl::Seconds(1));
      report(s);
      for (const HungRank& h : watchdog_.Check()) hung.push_back(h.rank);
    }
    return hung;
  }

  FakeClock clock_;
  LocalWatchdog watchdog_{&clock_, Options()};
};

TEST_F(LocalWatchdogTest, StartingAndInitGetTheInitAllowance) {
  watchdog_.Track("gpt-1", 1, 0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(10));
  clock_.Advance(absl::Minutes(10));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());  // Exactly the allowance is not beyond it.
  clock_.Advance(absl::Seconds(1));
  std::vector<HungRank> hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].job_id, "gpt-1");
  EXPECT_EQ(hung[0].generation, 1);
  EXPECT_EQ(hung[0].rank, 0);
  EXPECT_EQ(hung[0].phase, v1::WORKER_PHASE_STARTING);
  EXPECT_EQ(hung[0].silent, absl::Minutes(10) + absl::Seconds(1));
  EXPECT_EQ(hung[0].allowance, absl::Minutes(10));

  watchdog_.Track("gpt-1", 1, 1);
  watchdog_.Report("gpt-1", 1, 1, v1::WORKER_PHASE_INIT, 0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 1), absl::Minutes(10));
  clock_.Advance(absl::Minutes(9));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
  clock_.Advance(absl::Minutes(2));
  hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].rank, 1);
  EXPECT_EQ(hung[0].phase, v1::WORKER_PHASE_INIT);
}

// A command job's program may never use the worker API: its silence is not a hang until it has
// reported once; from then on it is watched like any other.
TEST_F(LocalWatchdogTest, ARankWatchedFromItsFirstReportIsNotHungBeforeIt) {
  watchdog_.Track("torch", 1, 0, {}, LocalWatchdog::WatchFrom::kFirstReport);
  watchdog_.Track("gpt-1", 1, 0);
  EXPECT_EQ(watchdog_.Allowance("torch", 0), absl::InfiniteDuration());
  clock_.Advance(absl::Hours(24));
  std::vector<HungRank> hung = watchdog_.Check();
  ASSERT_EQ(hung.size(), 1u);
  EXPECT_EQ(hung[0].job_id, "gpt-1");
  EXPECT_TRUE(watchdog_.Check().empty());
  // Its first report starts the watch, with the phase it reported.
  watchdog_.Report("torch", 1, 0, v1::WORKER_PHASE_INIT, 0);
  EXPECT_EQ(watchdog_.Allowance("torch", 0), absl::Minutes(10));
  clock_.Advance(absl::Minutes(10) + absl::Seconds(1));
  hung = watchdog_.Check();
  ASSERT_EQ(hung.size(), 1u);
  EXPECT_EQ(hung[0].job_id, "torch");
  EXPECT_EQ(hung[0].phase, v1::WORKER_PHASE_INIT);
  // A new generation's worker starts unwatched again.
  watchdog_.Track("torch", 2, 0, {}, LocalWatchdog::WatchFrom::kFirstReport);
  clock_.Advance(absl::Hours(1));
  EXPECT_TRUE(watchdog_.Check().empty());
}

TEST_F(LocalWatchdogTest, SlowCheckpointIsNotAHang) {
  watchdog_.Track("gpt-1", 1, 0);
  Steps(10, 1.0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(2));
  watchdog_.Report("gpt-1", 1, 0, v1::WORKER_PHASE_CHECKPOINT, 0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(30));
  clock_.Advance(absl::Minutes(20));  // Ten times the step allowance.
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
  clock_.Advance(absl::Minutes(10) + absl::Seconds(1));
  std::vector<HungRank> hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].phase, v1::WORKER_PHASE_CHECKPOINT);
  EXPECT_EQ(hung[0].allowance, absl::Minutes(30));
}

TEST_F(LocalWatchdogTest, CheckpointAllowanceIsItsOwnEvenWhenShorter) {
  WatchdogOptions options = Options();
  options.checkpoint_timeout = absl::Minutes(5);
  LocalWatchdog watchdog(&clock_, options);
  watchdog.Track("gpt-1", 1, 0);
  watchdog.Report("gpt-1", 1, 0, v1::WORKER_PHASE_CHECKPOINT, 0);
  EXPECT_EQ(watchdog.Allowance("gpt-1", 0), absl::Minutes(5));
  clock_.Advance(absl::Minutes(6));
  EXPECT_THAT(watchdog.Check(), SizeIs(1));
}

TEST_F(LocalWatchdogTest, StepAllowanceIsTheFloorUntilStepsAreSlow) {
  watchdog_.Track("gpt-1", 1, 0);
  // Stepping, no step time yet: the first step may warm up, so the init allowance.
  watchdog_.Report("gpt-1", 1, 0, v1::WORKER_PHASE_STEP, 0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(10));
  Steps(5, 1.0);  // 10 x 1 s < 2 min.
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(2));
  Steps(5, 30.0);  // p99 of ten samples is the largest: 10 x 30 s.
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(5));

  clock_.Advance(absl::Minutes(4));  // Beyond the floor, within 10 x p99.
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
  clock_.Advance(absl::Minutes(1) + absl::Milliseconds(1));
  std::vector<HungRank> hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].phase, v1::WORKER_PHASE_STEP);
  EXPECT_EQ(hung[0].allowance, absl::Minutes(5));
}

TEST_F(LocalWatchdogTest, StepAllowanceUsesTheNearestRankP99OfTheWindow) {
  WatchdogOptions options = Options();
  options.step_floor = absl::Seconds(1);
  LocalWatchdog watchdog(&clock_, options);
  watchdog.Track("gpt-1", 1, 0);
  auto steps = [&](int n, double seconds) {
    for (int i = 0; i < n; ++i) watchdog.Report("gpt-1", 1, 0, v1::WORKER_PHASE_STEP, seconds);
  };
  // 100 samples: the p99 is the 99th smallest. One outlier in 100 is above it...
  steps(99, 1.0);
  steps(1, 60.0);
  EXPECT_EQ(watchdog.Allowance("gpt-1", 0), absl::Seconds(10));
  // ...two are not (the window keeps 100: the newest outlier pushes out the oldest 1 s step).
  steps(1, 60.0);
  EXPECT_EQ(watchdog.Allowance("gpt-1", 0), absl::Seconds(600));
  // Both stay in the window for 98 more steps; the 99th pushes the first outlier out.
  steps(98, 1.0);
  EXPECT_EQ(watchdog.Allowance("gpt-1", 0), absl::Seconds(600));
  steps(1, 1.0);
  EXPECT_EQ(watchdog.Allowance("gpt-1", 0), absl::Seconds(10));
  // Eval shares the step allowance.
  watchdog.Report("gpt-1", 1, 0, v1::WORKER_PHASE_EVAL, 0);
  EXPECT_EQ(watchdog.Allowance("gpt-1", 0), absl::Seconds(10));
}

TEST_F(LocalWatchdogTest, WindowOfOne) {
  WatchdogOptions options = Options();
  options.step_floor = absl::Seconds(1);
  options.step_window = 1;
  LocalWatchdog watchdog(&clock_, options);
  watchdog.Track("gpt-1", 1, 0);
  watchdog.Report("gpt-1", 1, 0, v1::WORKER_PHASE_STEP, 60.0);
  EXPECT_EQ(watchdog.Allowance("gpt-1", 0), absl::Minutes(10));
  watchdog.Report("gpt-1", 1, 0, v1::WORKER_PHASE_STEP, 2.0);
  EXPECT_EQ(watchdog.Allowance("gpt-1", 0), absl::Seconds(20));
}

TEST_F(LocalWatchdogTest, AHangIsReturnedOnceUntilTheRankReportsAgain) {
  watchdog_.Track("gpt-1", 1, 0);
  Steps(3, 1.0);
  clock_.Advance(absl::Minutes(3));
  EXPECT_THAT(watchdog_.Check(), SizeIs(1));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
  clock_.Advance(absl::Hours(1));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());

  // It recovers, then stalls again: a new hang.
  Steps(1, 1.0);
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
  clock_.Advance(absl::Minutes(3));
  std::vector<HungRank> hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].silent, absl::Minutes(3));
}

TEST_F(LocalWatchdogTest, AHangIsReturnedAgainForANewCoordinatorStream) {
  watchdog_.Track("gpt-1", 1, 0);
  watchdog_.Track("gpt-1", 1, 1);
  Steps(3, 1.0, 0);
  Steps(3, 1.0, 1);
  clock_.Advance(absl::Minutes(3));
  Steps(1, 1.0, 1);  // rank 1 goes on
  EXPECT_THAT(watchdog_.Check(), SizeIs(1));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
  watchdog_.ReportHangsAgain();
  std::vector<HungRank> hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].rank, 0);
  EXPECT_EQ(hung[0].silent, absl::Minutes(3));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
}

TEST_F(LocalWatchdogTest, OnlySilentRanksAreHung) {
  watchdog_.Track("gpt-1", 1, 0);
  watchdog_.Track("gpt-1", 1, 1);
  watchdog_.Track("other", 3, 0);
  for (int minute = 0; minute < 15; ++minute) {
    clock_.Advance(absl::Minutes(1));
    Steps(1, 1.0, /*rank=*/0);
    watchdog_.Report("other", 3, 0, v1::WORKER_PHASE_INIT, 0);
  }
  std::vector<HungRank> hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].job_id, "gpt-1");
  EXPECT_EQ(hung[0].rank, 1);
  EXPECT_EQ(hung[0].silent, absl::Minutes(15));
}

TEST_F(LocalWatchdogTest, UntrackedRanksAreNeverHung) {
  watchdog_.Track("gpt-1", 1, 0);
  watchdog_.Untrack("gpt-1", 1, 0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::InfiniteDuration());
  // A report that raced with the exit does not track the rank again.
  watchdog_.Report("gpt-1", 1, 0, v1::WORKER_PHASE_STEP, 1.0);
  clock_.Advance(absl::Hours(2));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
  EXPECT_EQ(watchdog_.Allowance("never", 7), absl::InfiniteDuration());
}

TEST_F(LocalWatchdogTest, LateExitOfAnOldGenerationKeepsTheNewOneTracked) {
  watchdog_.Track("gpt-1", 2, 0);
  watchdog_.Untrack("gpt-1", 1, 0);   // Generation 1's worker exit, handled late.
  clock_.Advance(absl::Minutes(11));  // Past the 10-minute init allowance.
  ASSERT_EQ(watchdog_.Check().size(), 1u);
}

TEST_F(LocalWatchdogTest, ExplicitStepTimeoutReplacesTheDerivedOne) {
  watchdog_.Track("gpt-1", 1, 0, {absl::Seconds(3)});
  watchdog_.Report("gpt-1", 1, 0, v1::WORKER_PHASE_STEP, 0.5);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Seconds(3));
  clock_.Advance(absl::Seconds(3));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_EQ(watchdog_.Check().size(), 1u);
  // Init keeps its own allowance.
  watchdog_.Track("gpt-1", 2, 0, {absl::Seconds(3)});
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(10));
}

// A job's own init and checkpoint allowances replace the agent's; zero keeps the agent's.
TEST_F(LocalWatchdogTest, AJobsInitAndCheckpointAllowancesReplaceTheAgents) {
  v1::WatchdogSpec spec;
  spec.set_init_timeout_seconds(30);
  spec.set_checkpoint_timeout_seconds(3600);
  const JobAllowances own = AllowancesOf(spec);
  EXPECT_EQ(own.step, absl::ZeroDuration());
  watchdog_.Track("gpt-1", 1, 0, own);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Seconds(30));
  clock_.Advance(absl::Seconds(31));
  ASSERT_THAT(watchdog_.Check(), SizeIs(1));  // STARTING past 30 s, well before 10 min
  Steps(10, 1.0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(2));  // STEP: still the agent's
  watchdog_.Report("gpt-1", 1, 0, v1::WORKER_PHASE_CHECKPOINT, 0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Hours(1));
  clock_.Advance(absl::Minutes(45));  // past the agent's 30 min, a save this job allows
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
  clock_.Advance(absl::Minutes(15) + absl::Seconds(1));
  std::vector<HungRank> hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].phase, v1::WORKER_PHASE_CHECKPOINT);
  EXPECT_EQ(hung[0].allowance, absl::Hours(1));
  // A new generation keeps the job's allowances.
  watchdog_.Report("gpt-1", 2, 0, v1::WORKER_PHASE_INIT, 0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Seconds(30));
  // Unset, negative or non-finite values (validation refuses the last two) are the agent's.
  spec.set_init_timeout_seconds(-1);
  spec.set_checkpoint_timeout_seconds(std::nan(""));
  spec.set_hang_timeout_seconds(12);
  const JobAllowances agents = AllowancesOf(spec);
  EXPECT_EQ(agents.init, absl::ZeroDuration());
  EXPECT_EQ(agents.checkpoint, absl::ZeroDuration());
  EXPECT_EQ(agents.step, absl::Seconds(12));
  watchdog_.Track("gpt-2", 1, 0, agents);
  EXPECT_EQ(watchdog_.Allowance("gpt-2", 0), absl::Minutes(10));
}

// Before its first step, a command rank blocked in a collective that does not move is hung after
// the init allowance (its peer is stuck before the first step); one that computes (with a
// collective launched and not waited for, or none), or whose collectives move, is not.
TEST_F(LocalWatchdogTest, ACommandRankWaitingInAStillCollectiveBeforeItsFirstStepIsHung) {
  v1::WatchdogSpec spec;
  spec.set_init_timeout_seconds(60);
  watchdog_.Track("torch", 1, 0, AllowancesOf(spec), LocalWatchdog::WatchFrom::kFirstReport);
  watchdog_.Track("torch", 1, 1, AllowancesOf(spec), LocalWatchdog::WatchFrom::kFirstReport);
  // Not blocked: computing, however long, also with a collective launched and not waited for.
  Collectives("torch", 1, 0, {{"world", 1}}, {{"world", 1}}, false);
  EXPECT_EQ(watchdog_.Allowance("torch", 0), absl::InfiniteDuration());
  clock_.Advance(absl::Hours(3));
  Collectives("torch", 1, 0, {{"world", 2}}, {{"world", 1}}, false);
  clock_.Advance(absl::Hours(3));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
  // Blocked: watched with the init allowance while its numbers stay put.
  Collectives("torch", 1, 0, {{"world", 3}}, {{"world", 2}}, true);
  EXPECT_EQ(watchdog_.Allowance("torch", 0), absl::Seconds(60));
  clock_.Advance(absl::Seconds(40));
  Collectives("torch", 1, 0, {{"world", 3}}, {{"world", 2}}, true);
  clock_.Advance(absl::Seconds(15));
  // Moving numbers restart the wait: a collective that completed, a new group entered.
  Collectives("torch", 1, 0, {{"world", 4}, {"dp0", 1}}, {{"world", 3}},
                        true);
  clock_.Advance(absl::Seconds(59));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
  clock_.Advance(absl::Seconds(2));
  std::vector<HungRank> hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].rank, 0);
  EXPECT_TRUE(hung[0].in_collective);
  EXPECT_EQ(hung[0].phase, v1::WORKER_PHASE_STARTING);
  EXPECT_EQ(hung[0].silent, absl::Seconds(61));
  EXPECT_EQ(hung[0].allowance, absl::Seconds(60));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());  // once
  // Leaving the collective ends the wait.
  Collectives("torch", 1, 0, {{"world", 4}, {"dp0", 1}},
                        {{"world", 4}, {"dp0", 1}}, false);
  clock_.Advance(absl::Hours(1));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
  // After its first step, its collectives no longer matter: its silence does.
  Collectives("torch", 1, 1, {{"world", 2}}, {{"world", 1}}, true);
  watchdog_.Report("torch", 1, 1, v1::WORKER_PHASE_STEP, 0.5);
  for (int i = 0; i < 5; ++i) {
    Collectives("torch", 1, 1, {{"world", 9 + i}}, {{"world", 8 + i}},
                          true);
  }
  EXPECT_EQ(watchdog_.Allowance("torch", 1), absl::Minutes(2));
  clock_.Advance(absl::Minutes(2) + absl::Seconds(1));
  hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].rank, 1);
  EXPECT_FALSE(hung[0].in_collective);
  EXPECT_EQ(hung[0].phase, v1::WORKER_PHASE_STEP);
  // A stale generation's report is ignored; a newer one's starts the rank over, unwatched.
  Collectives("torch", 0, 0, {{"world", 3}}, {{"world", 1}}, true);
  Collectives("torch", 2, 1, {{"world", 1}}, {{"world", 1}}, false);
  EXPECT_EQ(watchdog_.Allowance("torch", 0), absl::InfiniteDuration());
  EXPECT_EQ(watchdog_.Allowance("torch", 1), absl::InfiniteDuration());
  clock_.Advance(absl::Hours(1));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
}

// Without the job's init_timeout, a wait before the first step is allowed until just before the
// program's own process-group timeout, when torch would give up by itself; without that, the
// agent's INIT allowance.
TEST_F(LocalWatchdogTest, AWaitBeforeTheFirstStepEndsJustBeforeTorchWouldGiveUp) {
  watchdog_.Track("torch", 1, 0, {}, LocalWatchdog::WatchFrom::kFirstReport);
  Collectives("torch", 1, 0, {{"world", 1}}, {}, true, 1800);  // torch's default, 30 min
  EXPECT_EQ(watchdog_.Allowance("torch", 0), absl::Seconds(1710));  // less 5%
  clock_.Advance(absl::Seconds(1710));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
  clock_.Advance(absl::Seconds(1));
  std::vector<HungRank> hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].allowance, absl::Seconds(1710));
  // Told again on a new coordinator stream, still counted from when its numbers last moved.
  watchdog_.ReportHangsAgain();
  hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].silent, absl::Seconds(1711));
  EXPECT_TRUE(hung[0].in_collective);
  // NCCL's 10 min (torch 2.2 on): 30 s before; a 40 s timeout: half of it; none: the agent's.
  Collectives("torch", 1, 0, {{"world", 1}}, {}, true, 600);
  EXPECT_EQ(watchdog_.Allowance("torch", 0), absl::Seconds(570));
  Collectives("torch", 1, 0, {{"world", 1}}, {}, true, 40);
  EXPECT_EQ(watchdog_.Allowance("torch", 0), absl::Seconds(20));
  Collectives("torch", 1, 0, {{"world", 1}}, {}, true, 0);
  EXPECT_EQ(watchdog_.Allowance("torch", 0), absl::Minutes(10));
  // The job's init_timeout, when set, wins either way.
  v1::WatchdogSpec spec;
  spec.set_init_timeout_seconds(90);
  watchdog_.Track("torch", 2, 1, AllowancesOf(spec), LocalWatchdog::WatchFrom::kFirstReport);
  Collectives("torch", 2, 1, {{"world", 1}}, {}, true, 1800);
  EXPECT_EQ(watchdog_.Allowance("torch", 1), absl::Seconds(90));
  // A phase report (a save before the first step) ends the rule: its silence is judged.
  watchdog_.Report("torch", 2, 1, v1::WORKER_PHASE_CHECKPOINT, 0);
  EXPECT_EQ(watchdog_.Allowance("torch", 1), absl::Minutes(30));
  Collectives("torch", 2, 1, {{"world", 2}}, {}, true, 1800);
  clock_.Advance(absl::Minutes(20));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
}

// A report with only a stack (before init_process_group; or a second Python process of the rank,
// an uploader, beside the one blocked in the collective) changes nothing: the wait is still
// counted from when the numbers last moved, with torch's timeout, for a rank not yet watched and
// for one that is.
TEST_F(LocalWatchdogTest, AReportWithOnlyAStackChangesNothing) {
  auto stack_only = [this](int rank) {
    v1::ReportCollectivesRequest report;
    report.mutable_worker()->set_job_id("torch");
    report.mutable_worker()->set_generation(1);
    report.mutable_worker()->set_rank(rank);
    report.set_stack("upload.py:3 in <module>");
    watchdog_.Collectives(report);
  };
  watchdog_.Track("torch", 1, 0, {}, LocalWatchdog::WatchFrom::kFirstReport);
  Collectives("torch", 1, 0, {{"world", 1}}, {}, true, 1800);
  clock_.Advance(absl::Seconds(1000));
  stack_only(0);
  Collectives("torch", 1, 0, {{"world", 1}}, {}, true, 1800);
  EXPECT_EQ(watchdog_.Allowance("torch", 0), absl::Seconds(1710));
  clock_.Advance(absl::Seconds(711));
  std::vector<HungRank> hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].silent, absl::Seconds(1711));
  // A stepping rank blocked in a collective: its silence is judged from its last step, and a
  // stack-only report is no report of it.
  watchdog_.Track("torch", 1, 1, {}, LocalWatchdog::WatchFrom::kFirstReport);
  watchdog_.Report("torch", 1, 1, v1::WORKER_PHASE_STEP, 0.1);
  Watch(1, 5, 4, true);
  // (The STEP allowance here: the 2 min floor.)
  EXPECT_THAT(Seconds(119, [&](int) { stack_only(1); }), IsEmpty());
  EXPECT_THAT(Seconds(2, [&](int) { stack_only(1); }), ElementsAre(1));
}

// The builtin trainer is watched from launch: its collectives reports change nothing, also
// from a newer generation's worker.
TEST_F(LocalWatchdogTest, CollectivesDoNotChangeARankWatchedFromLaunch) {
  watchdog_.Track("gpt-1", 1, 0);
  clock_.Advance(absl::Minutes(9));
  Collectives("gpt-1", 1, 0, {{"dp0", 2}}, {{"dp0", 1}}, true);
  clock_.Advance(absl::Minutes(1) + absl::Seconds(1));
  std::vector<HungRank> hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_FALSE(hung[0].in_collective);
  EXPECT_EQ(hung[0].silent, absl::Minutes(10) + absl::Seconds(1));
  Collectives("gpt-1", 2, 0, {{"dp0", 1}}, {}, true);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(10));  // STARTING, watched
  clock_.Advance(absl::Minutes(10) + absl::Seconds(1));
  hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].generation, 2);
  EXPECT_FALSE(hung[0].in_collective);
}

// After its first step, a rank whose reports say whether it is blocked (the Python watch): busy
// outside its steps (an evaluation) it is not hung at the STEP allowance (2 min here), only past
// the busy allowance (10 min); blocked in a collective that does not move, or with its side thread
// silent, it is hung at the STEP allowance; numbers that move are progress.
TEST_F(LocalWatchdogTest, AWatchedRankBusyOutsideItsStepsIsNotHungAtTheStepAllowance) {
  for (int rank = 0; rank < 4; ++rank) {
    watchdog_.Track("torch", 1, rank, {}, LocalWatchdog::WatchFrom::kFirstReport);
    watchdog_.Report("torch", 1, rank, v1::WORKER_PHASE_STEP, 0.1);
  }
  // Rank 0 evaluates for 9 min, outside any collective; rank 1 evaluates gathering its metrics
  // batch by batch (its numbers move); rank 2's side thread says it is busy for 10 s, then falls
  // silent (a frozen process): hung a STEP allowance after its last word, not after its last
  // step; rank 3 waits in an all-reduce that does not move, its host thread not blocked (NCCL:
  // queued, not finished by the GPU).
  int t = 0;  // seconds of `report` so far
  auto report = [&](int) {
    Watch(0, 10, 10, false);
    Watch(1, 10 + t, 9 + t, t % 2 == 0);
    if (t < 10) Watch(2, 10, 10, false);
    Watch(3, 11, 10, false);
    ++t;
  };
  // (Each rank's first report moves its numbers: silent from then on.)
  using ::testing::Contains;
  std::vector<int> hung = Seconds(122, report);
  EXPECT_THAT(hung, ::testing::ElementsAre(3));
  EXPECT_EQ(watchdog_.Allowance("torch", 0), absl::Minutes(10));
  EXPECT_EQ(watchdog_.Allowance("torch", 1), absl::Minutes(2));  // progressing
  EXPECT_EQ(watchdog_.Allowance("torch", 2), absl::Minutes(2));  // not believed any more
  EXPECT_THAT(Seconds(8, report), IsEmpty());
  EXPECT_THAT(Seconds(1, report), ::testing::ElementsAre(2));
  EXPECT_THAT(Seconds(7 * 60, report), IsEmpty());
  // Rank 0 reaches the metrics' all-reduce (its entry moves the numbers) and waits there for a
  // peer that does not come: hung a STEP allowance later, not at once after 9 silent minutes.
  EXPECT_THAT(Seconds(120, [&](int) { Watch(0, 11, 10, true); }), Not(Contains(0)));
  EXPECT_THAT(Seconds(2, [&](int) { Watch(0, 11, 10, true); }), Contains(0));
  // Busy past the busy allowance is hung too (every rank stuck outside collectives: a dead
  // shared filesystem under every data loader).
  watchdog_.Report("torch", 1, 0, v1::WORKER_PHASE_STEP, 0.1);
  EXPECT_THAT(Seconds(601, [&](int) { Watch(0, 12, 12, false); }), Not(Contains(0)));
  EXPECT_THAT(Seconds(1, [&](int) { Watch(0, 12, 12, false); }), Contains(0));
}

// A job's watchdog.hang_timeout bounds a busy rank too (the user's word on how long a step may
// take); reports without blocked_known (the builtin trainer's) change nothing after the first
// step.
TEST_F(LocalWatchdogTest, ABusyRankGetsTheJobsHangTimeoutAndOtherReportsNothing) {
  JobAllowances allowances;
  allowances.step = absl::Seconds(60);
  watchdog_.Track("torch", 1, 0, allowances, LocalWatchdog::WatchFrom::kFirstReport);
  watchdog_.Report("torch", 1, 0, v1::WORKER_PHASE_STEP, 0.1);
  EXPECT_THAT(Seconds(61, [&](int) { Watch(0, 5, 5, false); }), IsEmpty());
  EXPECT_THAT(Seconds(1, [&](int) { Watch(0, 5, 5, false); }), ::testing::ElementsAre(0));
  watchdog_.Track("torch", 1, 1, {}, LocalWatchdog::WatchFrom::kFirstReport);
  watchdog_.Report("torch", 1, 1, v1::WORKER_PHASE_STEP, 0.1);
  std::vector<int> hung = Seconds(121, [&](int s) {
    Collectives("torch", 1, 1, {{"world", 5 + s}}, {{"world", 5 + s}}, false);
  });
  EXPECT_THAT(hung, ::testing::ElementsAre(1));
}

// Under a shell, the watched program's last report says it ended: the shell's work after it
// (an upload) is not judged; a program that reports again is watched again.
TEST_F(LocalWatchdogTest, AProgramThatEndedLeavesItsShellUnwatched) {
  watchdog_.Track("torch", 1, 0, {}, LocalWatchdog::WatchFrom::kFirstReport);
  watchdog_.Report("torch", 1, 0, v1::WORKER_PHASE_STEP, 0.1);
  Watch(0, 7, 7, false);
  v1::ReportCollectivesRequest ended;
  ended.mutable_worker()->set_job_id("torch");
  ended.mutable_worker()->set_generation(1);
  ended.mutable_worker()->set_rank(0);
  ended.set_blocked_known(true);
  ended.set_watch_ended(true);
  watchdog_.Collectives(ended);
  EXPECT_EQ(watchdog_.Allowance("torch", 0), absl::InfiniteDuration());
  Watch(0, 8, 7, true);  // one its side thread had in flight: ignored
  EXPECT_EQ(watchdog_.Allowance("torch", 0), absl::InfiniteDuration());
  EXPECT_THAT(Seconds(60 * 60, [](int) {}), IsEmpty());
  watchdog_.Report("torch", 1, 0, v1::WORKER_PHASE_STEP, 0.1);  // the next program steps
  EXPECT_THAT(Seconds(121, [](int) {}), ::testing::ElementsAre(0));
}

TEST_F(LocalWatchdogTest, ExitedRankIsNotHung) {
  watchdog_.Track("gpt-1", 1, 0);
  watchdog_.Report("gpt-1", 1, 0, v1::WORKER_PHASE_EXITED, 0);
  clock_.Advance(absl::Hours(2));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
}

TEST_F(LocalWatchdogTest, UnspecifiedPhaseKeepsThePhaseButCountsAsAReport) {
  watchdog_.Track("gpt-1", 1, 0);
  watchdog_.Report("gpt-1", 1, 0, v1::WORKER_PHASE_CHECKPOINT, 0);
  clock_.Advance(absl::Minutes(25));
  watchdog_.Report("gpt-1", 1, 0, v1::WORKER_PHASE_UNSPECIFIED, 0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(30));
  clock_.Advance(absl::Minutes(25));
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
}

TEST_F(LocalWatchdogTest, TrackWithANewGenerationStartsOver) {
  watchdog_.Track("gpt-1", 1, 0);
  Steps(10, 30.0, 0, /*generation=*/1);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(5));
  clock_.Advance(absl::Minutes(11));
  // The relaunch: STARTING again, the old step times forgotten.
  watchdog_.Track("gpt-1", 2, 0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(10));
  watchdog_.Report("gpt-1", 2, 0, v1::WORKER_PHASE_STEP, 0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(10));  // no step of generation 2 yet

  // A straggling report of generation 1 is not a sign of life of generation 2.
  clock_.Advance(absl::Minutes(10));
  watchdog_.Report("gpt-1", 1, 0, v1::WORKER_PHASE_STEP, 60.0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(10));
  clock_.Advance(absl::Seconds(1));
  std::vector<HungRank> hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].generation, 2);
  EXPECT_EQ(hung[0].silent, absl::Minutes(10) + absl::Seconds(1));
}

TEST_F(LocalWatchdogTest, ReportOfANewerGenerationStartsOver) {
  watchdog_.Track("gpt-1", 1, 0);
  Steps(10, 60.0, 0, /*generation=*/1);
  watchdog_.Report("gpt-1", 2, 0, v1::WORKER_PHASE_INIT, 0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(10));
  watchdog_.Report("gpt-1", 2, 0, v1::WORKER_PHASE_STEP, 0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(10));  // No generation-1 step times.
  watchdog_.Report("gpt-1", 2, 0, v1::WORKER_PHASE_STEP, 1.0);
  EXPECT_EQ(watchdog_.Allowance("gpt-1", 0), absl::Minutes(2));  // The floor.
  clock_.Advance(absl::Minutes(3));
  std::vector<HungRank> hung = watchdog_.Check();
  ASSERT_THAT(hung, SizeIs(1));
  EXPECT_EQ(hung[0].generation, 2);
}

TEST_F(LocalWatchdogTest, ConcurrentReportsAndChecks) {
  constexpr int kRanks = 8;
  for (int r = 0; r < kRanks; ++r) watchdog_.Track("gpt-1", 1, r);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      for (int i = 0; i < 1000; ++i) {
        watchdog_.Report("gpt-1", 1, r, v1::WORKER_PHASE_STEP, 1.0 + r);
        if (i % 100 == 0) watchdog_.Check();
      }
    });
  }
  for (auto& t : threads) t.join();
  // The clock never moved: nobody is hung; every window holds its own rank's steps.
  EXPECT_THAT(watchdog_.Check(), IsEmpty());
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(watchdog_.Allowance("gpt-1", r),
              std::max(absl::Minutes(2), absl::Seconds(10 * (1 + r))));
  }
}

}  // namespace
}  // namespace ringmaster::agent
