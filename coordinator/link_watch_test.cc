#include "coordinator/link_watch.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using Kind = LinkWatch::Trigger::Kind;

// What a job's agents send: `ranks` ranks each forward a summary at most once a second (or once a
// step, when steps take longer), of the rank's last step; every trigger is sent at once.
class Stream {
 public:
  Stream(LinkWatch* watch, int ranks) : watch_(watch), ranks_(ranks) {}

  struct Fired {
    Kind kind;
    absl::Time at;
  };

  // Runs `seconds` of a job whose steps take step(rank, t) seconds, of which compute(rank, t),
  // sending each trigger (or, with `send` false, never sending it). Returns the triggers.
  std::vector<Fired> Run(double seconds, const std::function<double(int, double)>& step,
                         const std::function<double(int, double)>& compute, bool send = true) {
    std::vector<Fired> fired;
    const double end = t_ + seconds;
    while (t_ < end) {
      const double step_seconds = step(0, t_);
      const double interval = std::max(1.0, step_seconds);
      step_ += std::max<int64_t>(1, static_cast<int64_t>(interval / step_seconds));
      for (int rank = 0; rank < ranks_; ++rank) {
        const double t = t_ + rank * 0.01;
        const absl::Time now = start_ + absl::Seconds(t);
        auto trigger = watch_->Add({rank, step_, step(rank, t), compute(rank, t)}, now);
        if (trigger.has_value()) {
          fired.push_back({trigger->kind, now});
          EXPECT_FALSE(trigger->why.empty());
          if (send) watch_->Sent(now);
        }
      }
      t_ += interval;
    }
    return fired;
  }
  absl::Time At(double seconds) const { return start_ + absl::Seconds(seconds); }
  double now() const { return t_; }

 private:
  LinkWatch* watch_;
  const int ranks_;
  const absl::Time start_ = absl::FromUnixSeconds(1000000);
  double t_ = 0;
  int64_t step_ = 0;
};

auto Constant(double v) {
  return [v](int, double) { return v; };
}

LinkWatchOptions Options(absl::Duration interval = absl::Seconds(60)) {
  LinkWatchOptions o;
  o.min_interval = interval;
  return o;
}

TEST(LinkWatchTest, ADropTriggersOneCheckWithinAFewSeconds) {
  LinkWatch watch(Options());
  Stream stream(&watch, 4);
  EXPECT_TRUE(stream.Run(30, Constant(0.05), Constant(0.01)).empty());
  EXPECT_DOUBLE_EQ(watch.baseline_step_seconds(), 0.05);
  // The link falls to a few percent: every step waits 5x longer in its collectives.
  const double began = stream.now();
  auto fired = stream.Run(120, Constant(0.25), Constant(0.01));
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].kind, Kind::kDrop);
  EXPECT_LE(fired[0].at - stream.At(began), absl::Seconds(5));
  EXPECT_TRUE(watch.degraded());
  // The baseline is frozen while degraded: the slow steps never become the norm.
  EXPECT_DOUBLE_EQ(watch.baseline_step_seconds(), 0.05);
}

TEST(LinkWatchTest, AJobOfLongStepsIsJudgedOverStepsNotSeconds) {
  LinkWatch watch(Options());
  Stream stream(&watch, 4);
  EXPECT_TRUE(stream.Run(200, Constant(8), Constant(6)).empty());  // 25 steps
  const double began = stream.now();
  auto fired = stream.Run(400, Constant(20), Constant(6));
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].kind, Kind::kDrop);
  // Two slow steps of the last four make their median 14 s (1.75x).
  EXPECT_LE(fired[0].at - stream.At(began), absl::Seconds(41));
}

TEST(LinkWatchTest, TheRateLimitSpacesChecksAndADropThatOutlastsItIsCheckedOnce) {
  LinkWatch watch(Options(absl::Seconds(60)));
  Stream stream(&watch, 4);
  stream.Run(30, Constant(0.05), Constant(0.01));
  auto drop = stream.Run(20, Constant(0.25), Constant(0.01));
  ASSERT_EQ(drop.size(), 1u);
  // Back 20 s later: the confirming check waits for the interval since the first.
  auto back = stream.Run(100, Constant(0.05), Constant(0.01));
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].kind, Kind::kRecovered);
  EXPECT_GE(back[0].at - drop[0].at, absl::Seconds(60));
  EXPECT_LE(back[0].at - drop[0].at, absl::Seconds(62));
  // A second drop right after waits for the interval too, and is checked once however long.
  auto again = stream.Run(300, Constant(0.25), Constant(0.01));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].kind, Kind::kDrop);
  EXPECT_GE(again[0].at - back[0].at, absl::Seconds(60));
}

TEST(LinkWatchTest, AnUnsentCheckStaysOwed) {
  LinkWatch watch(Options());
  Stream stream(&watch, 4);
  stream.Run(30, Constant(0.05), Constant(0.01));
  auto owed = stream.Run(10, Constant(0.25), Constant(0.01), /*send=*/false);
  ASSERT_GE(owed.size(), 2u);  // returned at every sample until sent
  auto sent = stream.Run(10, Constant(0.25), Constant(0.01));
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].kind, Kind::kDrop);
}

TEST(LinkWatchTest, AComputeStragglerExplainsTheSlowdown) {
  {
    // Rank 2 computes 0.2 s more: its peers wait for it in the collectives. Whether or not the
    // straggler detector flagged it yet, that is compute.
    LinkWatch watch(Options());
    Stream stream(&watch, 4);
    stream.Run(30, Constant(0.05), Constant(0.01));
    auto slow_rank = [](int rank, double) { return rank == 2 ? 0.21 : 0.01; };
    EXPECT_TRUE(stream.Run(120, Constant(0.25), slow_rank).empty());
    EXPECT_FALSE(watch.degraded());
  }
  {
    // A busier host: every rank computes longer.
    LinkWatch watch(Options());
    Stream stream(&watch, 4);
    stream.Run(30, Constant(0.05), Constant(0.04));
    EXPECT_TRUE(stream.Run(120, Constant(0.2), Constant(0.19)).empty());
  }
  {
    // A small compute rise (a rank 1.3x its peers, which the straggler detector may flag on a
    // shared host) does not explain a step five times as long: the link is still checked.
    LinkWatch watch(Options());
    Stream stream(&watch, 4);
    stream.Run(30, Constant(0.05), Constant(0.01));
    auto bit_slower = [](int rank, double) { return rank == 0 ? 0.013 : 0.01; };
    auto fired = stream.Run(30, Constant(0.25), bit_slower);
    ASSERT_EQ(fired.size(), 1u);
    EXPECT_EQ(fired[0].kind, Kind::kDrop);
  }
  {
    // A compute slowdown that lasts becomes the norm: a link slowing down later is still seen.
    LinkWatch watch(Options());
    Stream stream(&watch, 4);
    stream.Run(30, Constant(0.05), Constant(0.01));
    EXPECT_TRUE(stream.Run(200, Constant(0.1), Constant(0.06)).empty());
    auto fired = stream.Run(30, Constant(0.5), Constant(0.06));
    ASSERT_EQ(fired.size(), 1u);
    EXPECT_EQ(fired[0].kind, Kind::kDrop);
  }
}

TEST(LinkWatchTest, ACleanNoisyRunOf2000RankStepsNeverTriggers) {
  for (const double base : {0.02, 0.5, 3.0}) {
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      LinkWatch watch(Options(absl::Seconds(1)));
      Stream stream(&watch, 4);
      std::mt19937 rng(seed);
      std::lognormal_distribution<double> jitter(0, 0.2);
      std::uniform_real_distribution<double> u(0, 1);
      // Lognormal jitter (a fifth either way is common), and one report in 30 three to six
      // times as slow (a checkpoint, a GC pause, a CPU taken by another process).
      auto noisy = [&](int, double) {
        double s = base * jitter(rng);
        if (u(rng) < 1.0 / 30) s *= 3 + 3 * u(rng);
        return s;
      };
      const double seconds = 500 * std::max(1.0, base);  // 500 summaries of each of 4 ranks
      EXPECT_TRUE(stream.Run(seconds, noisy, Constant(base * 0.2)).empty())
          << "base " << base << " seed " << seed;
      EXPECT_FALSE(watch.degraded());
    }
  }
}

TEST(LinkWatchTest, RecoveryIsReportedOnceTheStepTimeComesBack) {
  LinkWatch watch(Options(absl::Seconds(10)));
  Stream stream(&watch, 4);
  stream.Run(30, Constant(0.05), Constant(0.01));
  auto drop = stream.Run(30, Constant(0.25), Constant(0.01));
  ASSERT_EQ(drop.size(), 1u);
  EXPECT_TRUE(watch.degraded());
  const double restored = stream.now();
  auto back = stream.Run(60, Constant(0.055), Constant(0.01));
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].kind, Kind::kRecovered);
  EXPECT_LE(back[0].at - stream.At(restored), absl::Seconds(5));
  EXPECT_FALSE(watch.degraded());
  // Healthy again: the baseline moves on with the job.
  EXPECT_NEAR(watch.baseline_step_seconds(), 0.055, 1e-9);
}

TEST(LinkWatchTest, ADropThatEndsBeforeItsCheckCouldRunIsNotChecked) {
  {
    LinkWatch watch(Options(absl::Seconds(60)));
    Stream stream(&watch, 4);
    stream.Run(30, Constant(0.05), Constant(0.01));
    auto drop = stream.Run(20, Constant(0.25), Constant(0.01));
    ASSERT_EQ(drop.size(), 1u);
    ASSERT_TRUE(stream.Run(15, Constant(0.05), Constant(0.01)).empty());  // confirmation waits
    // A second short drop inside the interval, gone before the interval ends: not checked; the
    // first drop's link is still confirmed, once.
    auto later = stream.Run(10, Constant(0.25), Constant(0.01));
    EXPECT_TRUE(later.empty());
    later = stream.Run(120, Constant(0.05), Constant(0.01));
    ASSERT_EQ(later.size(), 1u);
    EXPECT_EQ(later[0].kind, Kind::kRecovered);
    EXPECT_GE(later[0].at - drop[0].at, absl::Seconds(60));
  }
  {
    // Checks are spaced by the interval: a drop right after one (here, of an earlier drop that
    // recovered) that ends within it has nothing to confirm either.
    LinkWatch watch(Options(absl::Seconds(60)));
    Stream stream(&watch, 4);
    stream.Run(30, Constant(0.05), Constant(0.01));
    auto fired = stream.Run(10, Constant(0.25), Constant(0.01));
    fired = stream.Run(70, Constant(0.05), Constant(0.01));
    ASSERT_EQ(fired.size(), 1u);  // confirmed
    EXPECT_TRUE(stream.Run(10, Constant(0.25), Constant(0.01)).empty());
    EXPECT_TRUE(stream.Run(120, Constant(0.05), Constant(0.01)).empty());
  }
}

TEST(LinkWatchTest, ADropTheCheckCannotExplainBecomesTheNorm) {
  LinkWatch watch(Options(absl::Seconds(10)));
  Stream stream(&watch, 4);
  stream.Run(30, Constant(0.05), Constant(0.01));
  ASSERT_EQ(stream.Run(10, Constant(0.1), Constant(0.01)).size(), 1u);
  watch.NothingFound();  // every link alike, or not the network
  EXPECT_FALSE(watch.degraded());
  EXPECT_TRUE(stream.Run(30, Constant(0.1), Constant(0.01)).empty());
  EXPECT_NEAR(watch.baseline_step_seconds(), 0.1, 1e-9);
  // A link slowing down after that is still seen, and only one recovery is checked later.
  auto fired = stream.Run(30, Constant(0.5), Constant(0.01));
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].kind, Kind::kDrop);
}

TEST(LinkWatchTest, ALinkSlowingRightAfterACheckThatFoundNothingIsStillSeen) {
  // What netns_slow_link_bench met: a short rise as a link came back was checked and showed
  // nothing; the next link slowed at once, before a new baseline could be learnt from healthy
  // steps. It must still be checked, measured from the level the check found nothing in.
  LinkWatch watch(Options(absl::Seconds(10)));
  Stream stream(&watch, 4);
  stream.Run(30, Constant(0.025), Constant(0.005));
  ASSERT_EQ(stream.Run(10, Constant(0.05), Constant(0.005)).size(), 1u);
  watch.NothingFound();
  auto fired = stream.Run(60, Constant(1.2), Constant(0.005));
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].kind, Kind::kDrop);
  // And once it comes back to the learnt baseline, the floor is gone: the recovery is confirmed
  // and a later 2x rise is a drop again.
  auto back = stream.Run(60, Constant(0.025), Constant(0.005));
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].kind, Kind::kRecovered);
  EXPECT_NEAR(watch.baseline_step_seconds(), 0.025, 1e-9);
}

TEST(LinkWatchTest, WarmUpStepsAreNotTheBaseline) {
  LinkWatch watch(Options());
  Stream stream(&watch, 4);
  // The first steps are slow (start-up): they are not what the job is measured against.
  EXPECT_TRUE(stream.Run(5, Constant(0.2), Constant(0.01)).empty());
  EXPECT_DOUBLE_EQ(watch.baseline_step_seconds(), 0);
}

}  // namespace
}  // namespace ringmaster::coordinator
