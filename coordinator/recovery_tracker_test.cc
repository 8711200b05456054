#include "coordinator/recovery_tracker.h"

#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

absl::Time At(double seconds) { return absl::FromUnixSeconds(1000) + absl::Seconds(seconds); }

TEST(RecoveryTrackerTest, PhasesOfARecoveryFromTheSlowestRank) {
  RecoveryTracker t;
  t.OnLaunch(2, At(0));
  EXPECT_FALSE(t.OnWorkerStarted(0, {At(0.1), 0.1, 0, 0.05}).has_value());  // no failure yet
  t.OnFailure(At(10.0), At(10.2));
  t.OnLaunch(2, At(10.25));
  EXPECT_FALSE(t.OnWorkerStarted(0, {At(10.5), 0.3, 0.05, 0.1}).has_value());
  EXPECT_FALSE(t.OnWorkerStarted(0, {At(10.5), 0.3, 0.05, 0.1}).has_value());  // a repeat
  auto p = t.OnWorkerStarted(1, {At(10.6), 0.2, 0.1, 0.2, /*link_check=*/0.05});
  ASSERT_TRUE(p.has_value());
  EXPECT_NEAR(p->detect, 0.2, 1e-9);
  EXPECT_NEAR(p->place, 0.05, 1e-9);
  EXPECT_NEAR(p->stop, 0.35, 1e-9);      // launch -> last process start
  EXPECT_NEAR(p->rendezvous, 0.3, 1e-9);
  EXPECT_NEAR(p->link_check, 0.05, 1e-9);
  EXPECT_NEAR(p->restore, 0.1, 1e-9);
  EXPECT_NEAR(p->first_step, 0.2, 1e-9);
  EXPECT_NEAR(p->total, 1.15, 1e-9);  // rank 1: 10.6 + 0.2 + 0.05 + 0.1 + 0.2 = 11.15
  EXPECT_EQ(p->ToString(),
            "1.15 s: detect 0.20, place 0.05, stop 0.35, rendezvous 0.30, link check 0.05, "
            "restore 0.10, first step 0.20");
  EXPECT_FALSE(t.OnWorkerStarted(1, {At(11), 0, 0, 0}).has_value());  // reported once
}

TEST(RecoveryTrackerTest, GoodputTakesBackWorkLostToARestart) {
  RecoveryTracker t;
  EXPECT_EQ(t.Goodput(At(5)), 0);
  t.OnLaunch(1, At(0));
  t.OnResume(0);
  for (int step = 1; step <= 10; ++step) t.OnStep(step, At(step), 1.0);  // 1 s a step
  EXPECT_NEAR(t.Goodput(At(10)), 1.0, 1e-9);
  // Fails at 10 s; restarts from the checkpoint at step 6 and runs again from 12 s.
  t.OnFailure(At(10), At(10.5));
  t.OnLaunch(1, At(11));
  t.OnResume(6);
  t.OnStep(7, At(13), 1.0);  // first step of the generation: its own duration counts
  t.OnStep(8, At(14), 1.0);
  // Kept: steps 1-6 (6 s) + steps 7, 8 again (2 s) = 8 s of 14 s.
  EXPECT_NEAR(t.Goodput(At(14)), 8.0 / 14.0, 1e-9);
  t.OnStep(8, At(15), 1.0);  // a repeated summary adds nothing
  EXPECT_NEAR(t.Goodput(At(14)), 8.0 / 14.0, 1e-9);
}

// A job that runs long keeps only the history back to its third newest checkpoint, and a
// resume at any of those three checkpoints still takes back exactly the work lost; one from
// further back (9700: three damaged checkpoints) is estimated pro rata, exact at a steady pace.
TEST(RecoveryTrackerTest, TheStepHistoryStaysBoundedAndResumesAtRecentCheckpointsStayExact) {
  for (int64_t resume_at : {9700, 9800, 9900, 9950}) {
    RecoveryTracker t;
    t.OnLaunch(1, At(0));
    t.OnResume(0);
    for (int step = 1; step <= 10000; ++step) {
      t.OnStep(step, At(step), 1.0);
      if (step % 100 == 0) t.OnCheckpoint(step);
    }
    EXPECT_LE(t.HistorySize(), 301u);  // steps 9800..10000, and the one kept before them
    t.OnCheckpoint(10000);             // a repeat changes nothing
    EXPECT_LE(t.HistorySize(), 301u);
    t.OnFailure(At(10000), At(10000));
    t.OnLaunch(1, At(10000));
    t.OnResume(resume_at);  // the newest intact checkpoint, or a step between checkpoints
    // Kept: steps 1..resume_at, 1 s each, of 10000 s.
    EXPECT_NEAR(t.Goodput(At(10000)), resume_at / 10000.0, 1e-9) << resume_at;
  }
}

}  // namespace
}  // namespace ringmaster::coordinator
