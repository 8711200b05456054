#include "coordinator/straggler_detector.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

// Feeds `rounds` samples to ranks 0..n-1 of one group; rank `slow` (if >= 0) computes `factor`
// times longer. Noise: +-`jitter` relative, uniform. Returns the changes seen, in order.
std::vector<StragglerDetector::Change> Feed(StragglerDetector* d, int n, int slow, double factor,
                                           int rounds, double jitter, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> noise(1 - jitter, 1 + jitter);
  std::vector<StragglerDetector::Change> changes;
  for (int round = 0; round < rounds; ++round) {
    for (int r = 0; r < n; ++r) {
      const double compute = 0.1 * (r == slow ? factor : 1.0) * noise(rng);
      if (auto c = d->Add(r, 0, n, compute)) changes.push_back(*c);
    }
  }
  return changes;
}

TEST(StragglerDetectorTest, FlagsTheSlowRankAfterTheHysteresisAndOnlyIt) {
  struct Case {
    int ranks;
    double factor;
  };
  for (const Case c : {Case{2, 1.3}, Case{4, 1.3}, Case{8, 1.5}}) {
    StragglerDetector d({1.2, 5, 3, 3});
    auto changes = Feed(&d, c.ranks, 1, c.factor, 10, 0.02);
    ASSERT_EQ(changes.size(), 1u) << c.ranks;
    EXPECT_EQ(changes[0].rank, 1);
    EXPECT_TRUE(changes[0].flagged);
    EXPECT_NEAR(changes[0].ratio, c.factor, 0.05);
    EXPECT_TRUE(d.flagged(1));
    EXPECT_FALSE(d.flagged(0));
  }
}

TEST(StragglerDetectorTest, NeedsMinSamplesThenHysteresisSamples) {
  StragglerDetector d({1.2, 5, 3, 3});
  // Samples 1-2 are too few to judge; samples 3, 4, 5 are above: flagged at the 5th.
  for (int round = 1; round <= 5; ++round) {
    d.Add(0, 0, 2, 0.1);
    auto c = d.Add(1, 0, 2, 0.2);
    EXPECT_EQ(c.has_value(), round == 5) << round;
  }
}

TEST(StragglerDetectorTest, ClearsWithHysteresisWhenTheRankRecovers) {
  StragglerDetector d({1.2, 3, 3, 3});
  Feed(&d, 2, 1, 1.5, 8, 0.0);
  ASSERT_TRUE(d.flagged(1));
  // Back to normal: the window (3) must fill with normal samples and then 3 below 1.1.
  auto changes = Feed(&d, 2, -1, 1.0, 10, 0.0);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].flagged);
  EXPECT_FALSE(d.flagged(1));
}

TEST(StragglerDetectorTest, NoFlagsInCleanNoisyRuns) {
  // 10% jitter on every sample, 10,000 rank-samples across 8 ranks: never flagged at 1.2.
  StragglerDetector d({1.2, 5, 3, 3});
  EXPECT_TRUE(Feed(&d, 8, -1, 1.0, 1250, 0.10, 7).empty());
}

TEST(StragglerDetectorTest, GroupsAreJudgedSeparately) {
  StragglerDetector d({1.2, 5, 3, 3});
  for (int round = 0; round < 10; ++round) {
    EXPECT_FALSE(d.Add(0, 0, 1, 0.1).has_value());  // group 0 has one member, steady
    d.Add(1, 1, 2, 0.3);                            // group 1: ranks 1 and 2, equal
    d.Add(2, 1, 2, 0.3);
  }
  EXPECT_FALSE(d.flagged(0));
  EXPECT_FALSE(d.flagged(1));
  EXPECT_DOUBLE_EQ(d.ratio(1), 1.0);
  EXPECT_FALSE(d.Add(3, 1, 2, 0.0).has_value());  // no compute time: ignored
}

// Ranks alone in their groups (the stages of a pure pipeline, which run different layers: 0.1 s
// and 0.3 s here) are judged by their slowdown, each level over its own baseline (after 3
// warm-up samples, however slow, and 5 more), against the other lone ranks': rank 1 slowing to
// 1.5x while rank 0 does not is flagged, and cleared when it recovers; both slowing alike (a
// busier host) flags neither.
TEST(StragglerDetectorTest, ARankAloneInItsGroupIsJudgedByItsSlowdown) {
  StragglerDetector d({1.2, 5, 3, 3});
  auto feed = [&](int rounds, double first, double second) {
    std::vector<StragglerDetector::Change> changes;
    for (int i = 0; i < rounds; ++i) {
      if (auto c = d.Add(0, 0, 1, first)) changes.push_back(*c);
      if (auto c = d.Add(1, 1, 1, second)) changes.push_back(*c);
    }
    return changes;
  };
  EXPECT_TRUE(feed(3, 1.0, 3.0).empty());  // warm-up
  EXPECT_TRUE(feed(5, 0.1, 0.3).empty());  // the baselines
  EXPECT_DOUBLE_EQ(d.ratio(1), 1.0);
  std::vector<StragglerDetector::Change> changes = feed(10, 0.1, 0.45);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 1);
  EXPECT_TRUE(changes[0].flagged);
  EXPECT_TRUE(changes[0].against_baseline);
  EXPECT_NEAR(changes[0].ratio, 1.5, 1e-9);
  changes = feed(10, 0.1, 0.3);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].flagged);
  EXPECT_TRUE(feed(20, 0.15, 0.45).empty()) << "every stage slowed alike";
  EXPECT_NEAR(d.ratio(1), 1.0, 1e-9);

  // A clean noisy run of four lone ranks is never flagged (10% jitter, 10,000 samples).
  StragglerDetector clean({1.2, 5, 3, 3});
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> noise(0.9, 1.1);
  for (int i = 0; i < 2500; ++i) {
    for (int r = 0; r < 4; ++r) {
      EXPECT_FALSE(clean.Add(r, r, 1, 0.1 * (r + 1) * noise(rng)).has_value());
    }
  }
}

// The numbers of a pipeline stage's two ranks under a slow link (tests/netns_no_false_blame_test,
// 4 Mbit/s on one of four nodes): steps of about 0.33 s almost all waiting, and compute of about
// a millisecond, one rank's 0.4 ms more than its peer's (a busy host's scheduling: 1.4x). That
// excess is 0.1% of the step: nobody is flagged. Without the step times the same samples flag
// the rank.
TEST(StragglerDetectorTest, ASlowLinkFlagsNobodyWhoseExcessIsANegligibleShareOfTheStep) {
  for (const bool with_steps : {true, false}) {
    StragglerDetector d(StragglerOptions{});
    std::vector<StragglerDetector::Change> changes;
    for (int round = 0; round < 30; ++round) {
      const double step = with_steps ? 0.33 : 0;
      if (auto c = d.Add(1, 1, 2, 0.0009, step)) changes.push_back(*c);
      if (auto c = d.Add(3, 1, 2, 0.0013, step)) changes.push_back(*c);
    }
    if (with_steps) {
      EXPECT_TRUE(changes.empty()) << "rank " << changes[0].rank << " flagged";
    } else {
      ASSERT_EQ(changes.size(), 1u);
      EXPECT_EQ(changes[0].rank, 3);
    }
    EXPECT_NEAR(d.ratio(3), 1.3 / 0.9, 1e-9);  // the ratio is still reported
  }
}

// A rank whose excess is a real share of the step is flagged as before (30 ms of compute against
// 20, in 40 ms steps: the group waits 25% of its step for it), and cleared once its excess stops
// mattering (the steps grow to 1 s of waiting on a slow link while the ratio stays).
TEST(StragglerDetectorTest, AnExcessThatDelaysTheStepIsFlaggedAndClearsWhenItNoLongerDoes) {
  StragglerDetector d(StragglerOptions{});
  std::vector<StragglerDetector::Change> changes;
  for (int round = 0; round < 15; ++round) {
    for (int rank = 0; rank < 4; ++rank) {
      if (auto c = d.Add(rank, 0, 4, rank == 2 ? 0.030 : 0.020, 0.040)) changes.push_back(*c);
    }
  }
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 2);
  EXPECT_TRUE(changes[0].flagged);
  changes.clear();
  for (int round = 0; round < 15; ++round) {
    for (int rank = 0; rank < 4; ++rank) {
      if (auto c = d.Add(rank, 0, 4, rank == 2 ? 0.030 : 0.020, 1.0)) changes.push_back(*c);
    }
  }
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 2);
  EXPECT_FALSE(changes[0].flagged);
}

// netns_slow_link_bench, trial 5: four ranks of one stage under a slow link, one step (1.4 s,
// ~5.5 ms of compute) per summary, rank 0's last one before a mid-run link check with 83.6 ms
// (a busy host). Through the 7.5 s check the agents' summaries repeated each rank's last step
// (no step since), then training went on at ~30 ms steps, every rank alike. With the steps
// given, the repeats are no samples and nobody is flagged; without them (step 0: unknown), rank
// 0's repeated 83.6 ms fills its median and it is flagged at ~14x, as the bench saw (15.18x).
TEST(StragglerDetectorTest, ASummaryRepeatedWithoutANewStepIsNoSample) {
  for (const bool with_steps : {true, false}) {
    StragglerDetector d(StragglerOptions{});
    std::vector<StragglerDetector::Change> changes;
    auto add = [&](int rank, double compute, double step_seconds, int64_t step) {
      if (auto c = d.Add(rank, 0, 4, compute, step_seconds, with_steps ? step : 0)) {
        changes.push_back(*c);
      }
    };
    int64_t step = 800;
    for (; step <= 813; ++step) {  // the slow link: one step per summary
      for (int rank = 0; rank < 4; ++rank) {
        const double compute = rank == 0 && step == 813 ? 0.0836 : 0.0050 + 0.0005 * rank;
        add(rank, compute, 1.4, step);
      }
    }
    for (int repeat = 0; repeat < 8; ++repeat) {  // the link check: the same summaries again
      for (int rank = 0; rank < 4; ++rank) {
        add(rank, rank == 0 ? 0.0836 : 0.0050 + 0.0005 * rank, 1.4, 813);
      }
    }
    for (int round = 0; round < 10; ++round, step += 30) {  // training again, 30 steps a summary
      for (int rank = 0; rank < 4; ++rank) add(rank, 0.016 + 0.0005 * rank, 0.030, step);
    }
    if (with_steps) {
      EXPECT_TRUE(changes.empty())
          << "rank " << changes[0].rank << " flagged at " << changes[0].ratio << "x";
    } else {
      ASSERT_FALSE(changes.empty());
      EXPECT_EQ(changes[0].rank, 0);
      EXPECT_TRUE(changes[0].flagged);
      EXPECT_GT(changes[0].ratio, 10);
    }
  }
}

}  // namespace
}  // namespace ringmaster::coordinator
