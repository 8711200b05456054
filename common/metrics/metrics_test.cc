#include <thread>
#include <vector>

#include "common/metrics/metric.h"
#include "common/metrics/registry.h"
#include "gtest/gtest.h"

namespace ringmaster::metrics {
namespace {

TEST(CounterTest, IgnoresNegativeAndNaN) {
  Counter c;
  c.Increment();
  c.Increment(2.5);
  c.Increment(-10);
  c.Increment(std::nan(""));
  EXPECT_EQ(c.Value(), 3.5);
}

TEST(HistogramTest, BucketsAreInclusiveUpperBounds) {
  Histogram h({1, 2, 5});
  for (double v : {0.5, 1.0, 1.5, 2.0, 4.0, 5.0, 7.0, 100.0}) h.Observe(v);
  Histogram::Snapshot s = h.Read();
  // le=1: {0.5, 1.0}; le=2: +{1.5, 2.0}; le=5: +{4, 5}; +Inf: +{7, 100}.
  EXPECT_EQ(s.cumulative_counts, (std::vector<uint64_t>{2, 4, 6, 8}));
  EXPECT_EQ(s.count, 8u);
  EXPECT_DOUBLE_EQ(s.sum, 0.5 + 1 + 1.5 + 2 + 4 + 5 + 7 + 100);
}

TEST(HistogramTest, NaNGoesToInfBucket) {
  Histogram h({1});
  h.Observe(std::nan(""));
  EXPECT_EQ(h.Read().cumulative_counts, (std::vector<uint64_t>{0, 1}));
}

TEST(HistogramTest, BucketHelpers) {
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(LinearBuckets(0.5, 0.5, 3), (std::vector<double>{0.5, 1.0, 1.5}));
}

TEST(HistogramDeathTest, RejectsUnsortedBounds) {
  EXPECT_DEATH(Histogram({2, 1}), "strictly increasing");
}

TEST(RegistryTest, ConcurrentUpdatesFromManyThreadsAreExact) {
  Registry registry;
  auto& counters = registry.AddCounter("test_ops_total", "Ops.", {"worker"});
  auto& gauges = registry.AddGauge("test_level", "Level.");
  auto& histograms = registry.AddHistogram("test_latency_seconds", "Latency.", {}, {0.5, 1.5});
  constexpr int kThreads = 16;
  constexpr int kIterations = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Half the threads share one child, half have their own: both must be exact.
      auto counter = counters.WithLabels({t % 2 == 0 ? "shared" : "w" + std::to_string(t)});
      auto gauge = gauges.WithLabels({});
      auto histogram = histograms.WithLabels({});
      for (int i = 0; i < kIterations; ++i) {
        counter->Increment();
        gauge->Add(i % 2 == 0 ? 1 : -1);
        histogram->Observe(i % 2);  // 0 -> le=0.5, 1 -> le=1.5.
      }
    });
  }
  // Render concurrently with the updates: must not crash or deadlock.
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(registry.RenderText().empty());
  for (auto& t : threads) t.join();

  EXPECT_EQ(counters.WithLabels({"shared"})->Value(), (kThreads / 2) * kIterations);
  EXPECT_EQ(counters.WithLabels({"w1"})->Value(), kIterations);
  EXPECT_EQ(gauges.WithLabels({})->Value(), 0);
  Histogram::Snapshot s = histograms.WithLabels({})->Read();
  EXPECT_EQ(s.count, static_cast<uint64_t>(kThreads) * kIterations);
  EXPECT_EQ(s.cumulative_counts[0], static_cast<uint64_t>(kThreads) * kIterations / 2);
  EXPECT_EQ(s.sum, kThreads * kIterations / 2);
}

TEST(RegistryTest, WithLabelsReturnsTheSameChild) {
  Registry registry;
  auto& family = registry.AddGauge("test_gauge", "G.", {"a", "b"});
  EXPECT_EQ(family.WithLabels({"1", "2"}), family.WithLabels({"1", "2"}));
  EXPECT_NE(family.WithLabels({"1", "2"}), family.WithLabels({"2", "1"}));
}

TEST(RegistryTest, RemovedChildIsNoLongerExportedButStaysUsable) {
  Registry registry;
  auto& family = registry.AddGauge("test_gauge", "G.", {"job"});
  auto child = family.WithLabels({"old"});
  family.WithLabels({"new"})->Set(1);
  family.Remove({"old"});
  child->Set(5);  // Still safe to use.
  std::string text = registry.RenderText();
  EXPECT_EQ(text.find("old"), std::string::npos) << text;
  EXPECT_NE(text.find("test_gauge{job=\"new\"} 1"), std::string::npos) << text;
}

TEST(RegistryTest, AddingTheSameFamilyTwiceReturnsIt) {
  Registry registry;
  auto& a = registry.AddCounter("test_total", "T.", {"x"});
  auto& b = registry.AddCounter("test_total", "T.", {"x"});
  EXPECT_EQ(&a, &b);
}

TEST(RegistryDeathTest, ConflictingRegistrationAborts) {
  Registry registry;
  registry.AddCounter("test_total", "T.", {"x"});
  EXPECT_DEATH(registry.AddGauge("test_total", "T.", {"x"}), "registered twice");
  EXPECT_DEATH(registry.AddCounter("test_total", "T.", {"y"}), "registered twice");
}

TEST(RegistryDeathTest, InvalidNamesAbort) {
  Registry registry;
  EXPECT_DEATH(registry.AddCounter("1bad", "T."), "invalid metric name");
  EXPECT_DEATH(registry.AddCounter("ok_total", "T.", {"__reserved"}), "invalid label name");
  EXPECT_DEATH(registry.AddHistogram("h_seconds", "T.", {"le"}, {1}), "reserved");
  auto& family = registry.AddGauge("g", "T.", {"a"});
  EXPECT_DEATH(family.WithLabels({"1", "2"}), "expected 1 label values");
}

TEST(NameValidationTest, FollowsPrometheusGrammar) {
  EXPECT_TRUE(IsValidMetricName("ringmaster_step_seconds"));
  EXPECT_TRUE(IsValidMetricName("job:loss:avg"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_TRUE(IsValidLabelName("rank"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("9a"));
}

}  // namespace
}  // namespace ringmaster::metrics
