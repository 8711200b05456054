#include "coordinator/link_analysis.h"

#include <algorithm>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

constexpr int64_t kBytes = 4 << 20;

// Rank `rank` on `node` measured its link to `peer` on `peer_node` at `gbps` GB/s.
LinkSample Sample(const std::string& group, int rank, const std::string& node, int peer,
                  const std::string& peer_node, double gbps, int64_t wrong = 0) {
  LinkSample s;
  s.group = group;
  s.rank = rank;
  s.peer_rank = peer;
  s.node = node;
  s.peer_node = peer_node;
  s.bytes = kBytes;
  s.seconds = kBytes / (gbps * 1e9);
  s.wrong = wrong;
  return s;
}

// A data-parallel ring of `bandwidths.size()` ranks, one per node "n<rank>", edge i (rank i to
// i+1) at bandwidths[i] GB/s, reported by both of its ends.
LinkCheckCollector Ring(const std::vector<double>& bandwidths, double ratio = 0.5) {
  const int n = static_cast<int>(bandwidths.size());
  LinkCheckCollector c(/*generation=*/3, /*step=*/0, n, ratio, /*floor=*/0);
  std::vector<std::vector<LinkSample>> by_rank(n);
  for (int i = 0; i < n; ++i) {
    const int j = (i + 1) % n;
    const std::string a = "n" + std::to_string(i), b = "n" + std::to_string(j);
    by_rank[i].push_back(Sample("dp0", i, a, j, b, bandwidths[i]));
    by_rank[j].push_back(Sample("dp0", j, b, i, a, bandwidths[i]));
  }
  for (int r = 0; r < n; ++r) EXPECT_TRUE(c.Add(r, by_rank[r]));
  return c;
}

TEST(LinkAnalysisTest, TheSlowLinkOfARingIsNamedWithItsNodesAndBaseline) {
  LinkCheckCollector c = Ring({10, 10, 1, 10, 10, 10});
  ASSERT_TRUE(c.complete());
  const v1::LinkCheckSummary s = c.Summarize();
  EXPECT_EQ(s.generation(), 3);
  EXPECT_EQ(s.ranks_reported(), 6);
  EXPECT_EQ(s.ranks_expected(), 6);
  ASSERT_EQ(s.classes_size(), 1);
  EXPECT_EQ(s.classes(0).kind(), "dp");
  EXPECT_TRUE(s.classes(0).cross_node());
  EXPECT_EQ(s.classes(0).links(), 6);
  EXPECT_DOUBLE_EQ(s.classes(0).median_bytes_per_second(), 10e9);
  EXPECT_DOUBLE_EQ(s.classes(0).min_bytes_per_second(), 1e9);
  ASSERT_EQ(s.slow_size(), 1);
  const v1::LinkState& slow = s.slow(0);
  EXPECT_EQ(slow.group(), "dp0");
  EXPECT_EQ(slow.rank(), 2);
  EXPECT_EQ(slow.peer_rank(), 3);
  EXPECT_EQ(slow.node(), "n2");
  EXPECT_EQ(slow.peer_node(), "n3");
  EXPECT_DOUBLE_EQ(slow.bytes_per_second(), 1e9);
  EXPECT_DOUBLE_EQ(slow.baseline_bytes_per_second(), 10e9);
  EXPECT_EQ(slow.wrong(), 0);
}

// Two data-parallel groups of two ranks on four nodes: dp0's link at `a` GB/s, dp1's at `b`.
int SlowOfTwo(double a, double b, double ratio = 0.5) {
  LinkCheckCollector c(1, /*step=*/0, 4, ratio, /*floor=*/0);
  EXPECT_TRUE(c.Add(0, {Sample("dp0", 0, "n0", 1, "n1", a)}));
  EXPECT_TRUE(c.Add(1, {Sample("dp0", 1, "n1", 0, "n0", a)}));
  EXPECT_TRUE(c.Add(2, {Sample("dp1", 2, "n2", 3, "n3", b)}));
  EXPECT_TRUE(c.Add(3, {Sample("dp1", 3, "n3", 2, "n2", b)}));
  const v1::LinkCheckSummary s = c.Summarize();
  EXPECT_EQ(s.classes_size(), 1);
  return s.slow_size() == 0 ? -1 : s.slow(0).rank();
}

TEST(LinkAnalysisTest, TwoLinksCompareDirectlyAndTheRatioIsTheThreshold) {
  // Leave-one-out: each is judged against the other alone.
  EXPECT_EQ(SlowOfTwo(10, 4.9), 2);
  EXPECT_EQ(SlowOfTwo(4.9, 10), 0);
  EXPECT_EQ(SlowOfTwo(10, 5.1), -1);
  EXPECT_EQ(SlowOfTwo(10, 5.1, /*ratio=*/0.6), 2);
  EXPECT_EQ(Ring({10, 10, 10, 10}).Summarize().slow_size(), 0);
}

TEST(LinkAnalysisTest, LinksAreComparedOnlyWithLinksOfTheirKind) {
  // Ranks 0, 1 on node a and 2, 3 on node b: the dp ring has two links inside a node (40 GB/s)
  // and two across (4 GB/s); the tp link inside node a runs at 100 GB/s.
  LinkCheckCollector c(1, /*step=*/0, 4, 0.5, /*floor=*/0);
  EXPECT_TRUE(c.Add(0, {Sample("dp0", 0, "a", 1, "a", 40), Sample("dp0", 0, "a", 3, "b", 4),
                        Sample("tp0", 0, "a", 1, "a", 100)}));
  EXPECT_TRUE(c.Add(1, {Sample("dp0", 1, "a", 2, "b", 4)}));
  EXPECT_TRUE(c.Add(2, {Sample("dp0", 2, "b", 3, "b", 40)}));
  EXPECT_FALSE(c.complete());
  EXPECT_TRUE(c.Add(3, {}));
  EXPECT_TRUE(c.complete());
  const v1::LinkCheckSummary s = c.Summarize();
  EXPECT_EQ(s.slow_size(), 0) << s.DebugString();
  ASSERT_EQ(s.classes_size(), 3);  // dp inside a node, dp across nodes, tp
  EXPECT_EQ(s.classes(0).kind(), "dp");
  EXPECT_FALSE(s.classes(0).cross_node());
  EXPECT_EQ(s.classes(0).links(), 2);
  EXPECT_TRUE(s.classes(1).cross_node());
  EXPECT_DOUBLE_EQ(s.classes(1).median_bytes_per_second(), 4e9);
  EXPECT_EQ(s.classes(2).kind(), "tp");
  EXPECT_EQ(s.classes(2).links(), 1);
}

TEST(LinkAnalysisTest, ALinkAloneIsNeverSlowButWrongDataIsAlwaysListedFirst) {
  LinkCheckCollector c(1, /*step=*/0, 4, 0.5, /*floor=*/0);
  // Alone in its kind (pp across nodes) and slow: nothing to compare with.
  EXPECT_TRUE(c.Add(0, {Sample("pp0", 0, "a", 1, "b", 0.1)}));
  // A fast dp link whose two ends each received 2 wrong elements, and a slow dp link.
  EXPECT_TRUE(c.Add(2, {Sample("dp1", 2, "c", 3, "d", 10, 2), Sample("dp1", 2, "c", 3, "d", 1)}));
  EXPECT_TRUE(c.Add(3, {Sample("dp1", 3, "d", 2, "c", 10, 2)}));
  const v1::LinkCheckSummary s = c.Summarize();
  EXPECT_EQ(s.ranks_reported(), 3);
  ASSERT_EQ(s.slow_size(), 1) << s.DebugString();
  // The two dp1 samples between 2 and 3 are one link: its slower time (1 GB/s) and the wrong
  // elements of both ends.
  EXPECT_EQ(s.slow(0).wrong(), 4);
  EXPECT_DOUBLE_EQ(s.slow(0).bytes_per_second(), 1e9);
  EXPECT_EQ(s.slow(0).baseline_bytes_per_second(), 0);  // alone in its kind too
}

TEST(LinkAnalysisTest, ARankReportsOnceAndOnlyRanksOfTheJob) {
  LinkCheckCollector c(1, /*step=*/0, 2, 0.5, /*floor=*/0);
  EXPECT_FALSE(c.Add(-1, {}));
  EXPECT_FALSE(c.Add(2, {}));
  EXPECT_TRUE(c.Add(1, {Sample("dp0", 1, "b", 0, "a", 5)}));
  EXPECT_FALSE(c.Add(1, {Sample("dp0", 1, "b", 0, "a", 0.001)}));
  EXPECT_EQ(c.Summarize().ranks_reported(), 1);
  EXPECT_DOUBLE_EQ(c.Summarize().classes(0).min_bytes_per_second(), 5e9);
}

// A link inside a node at 0.05x its kind's median (5 GB/s) comes before a link across nodes that
// is slower in bytes per second (4 GB/s) but only 0.4x its kind's median.
TEST(LinkAnalysisTest, LinksAreListedByHowFarBelowTheirKindTheyAre) {
  LinkCheckCollector c(1, /*step=*/0, 8, 0.5, /*floor=*/0);
  EXPECT_TRUE(c.Add(0, {Sample("tp0", 0, "a", 1, "a", 100), Sample("tp1", 2, "a", 3, "a", 100),
                        Sample("tp2", 4, "a", 5, "a", 5), Sample("dp0", 0, "a", 6, "b", 10),
                        Sample("dp1", 1, "a", 7, "b", 10), Sample("dp2", 2, "a", 6, "b", 4)}));
  const v1::LinkCheckSummary s = c.Summarize();
  ASSERT_EQ(s.slow_size(), 2) << s.DebugString();
  EXPECT_EQ(s.slow(0).group(), "tp2");
  EXPECT_EQ(s.slow(1).group(), "dp2");
}

TEST(LinkAnalysisTest, AtMostSixteenLinksAreListedSlowestFirst) {
  std::vector<double> bandwidths(64, 10);
  for (int i = 0; i < 20; ++i) bandwidths[i * 3] = 0.1 * (i + 1);
  const v1::LinkCheckSummary s = Ring(bandwidths).Summarize();
  ASSERT_EQ(s.slow_size(), kMaxListedLinks);
  for (int i = 1; i < s.slow_size(); ++i) {
    EXPECT_LE(s.slow(i - 1).bytes_per_second(), s.slow(i).bytes_per_second());
  }
  EXPECT_EQ(s.slow(0).rank(), 0);
}

TEST(LinkAnalysisTest, AFloorNamesLinksThatAreAllSlowAlike) {
  // One NIC per node on two nodes: both cross-node links at 2 GB/s, so neither is slower than
  // the other; only a floor of 10 GB/s says they are both too slow.
  for (double floor : {0.0, 1e10}) {
    LinkCheckCollector c(1, /*step=*/0, 4, 0.5, floor);
    EXPECT_TRUE(c.Add(0, {Sample("dp0", 0, "a", 1, "a", 40), Sample("dp0", 0, "a", 3, "b", 2)}));
    EXPECT_TRUE(c.Add(1, {Sample("dp0", 1, "a", 2, "b", 2)}));
    EXPECT_TRUE(c.Add(2, {Sample("dp0", 2, "b", 3, "b", 40)}));
    EXPECT_TRUE(c.Add(3, {}));
    const v1::LinkCheckSummary s = c.Summarize();
    EXPECT_EQ(s.min_bytes_per_second(), floor);
    if (floor == 0) {
      EXPECT_EQ(s.slow_size(), 0);
      continue;
    }
    ASSERT_EQ(s.slow_size(), 2) << s.DebugString();
    for (const v1::LinkState& l : s.slow()) {
      EXPECT_TRUE(l.below_floor());
      EXPECT_NE(l.node(), l.peer_node());
    }
  }
}

TEST(LinkAnalysisTest, ACorruptionIsTakenOnceAsSoonAsAReportSaysSo) {
  LinkCheckCollector c(1, /*step=*/0, 3, 0.5, 0);
  EXPECT_TRUE(
      c.Add(1, {Sample("dp0", 1, "b", 2, "c", 5, /*wrong=*/7), Sample("dp0", 1, "b", 0, "a", 5)}));
  std::vector<v1::LinkState> first = c.TakeNewCorruptions();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].rank(), 1);
  EXPECT_EQ(first[0].peer_rank(), 2);
  EXPECT_EQ(first[0].node(), "b");
  EXPECT_EQ(first[0].peer_node(), "c");
  EXPECT_EQ(first[0].wrong(), 7);
  EXPECT_TRUE(c.TakeNewCorruptions().empty());  // taken already
  EXPECT_TRUE(c.Add(2, {Sample("dp0", 2, "c", 1, "b", 5, 1)}));
  EXPECT_TRUE(c.TakeNewCorruptions().empty());  // the same link, more wrong elements
  EXPECT_TRUE(c.Add(0, {Sample("dp0", 0, "a", 2, "c", 5, 2)}));
  ASSERT_EQ(c.TakeNewCorruptions().size(), 1u);  // another link
  EXPECT_EQ(c.Summarize().slow(0).wrong() + c.Summarize().slow(1).wrong(), 10);
}

// The leave-one-out medians are taken from one sorted list; they must equal the plain definition.
TEST(LinkAnalysisTest, EachBaselineIsTheMedianOfTheOtherLinks) {
  std::mt19937 rng(7);
  for (int n : {2, 3, 4, 5, 8, 13}) {
    std::vector<double> gbps(n);
    for (double& g : gbps) g = std::uniform_int_distribution<int>(1, 9)(rng);  // with ties
    LinkCheckCollector c(1, /*step=*/0, n, 0.5, /*floor=*/1e12);  // every link under the floor: all listed
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(c.Add(r, {Sample("dp" + std::to_string(r), r, "a", (r + 1) % n, "b", gbps[r])}));
    }
    const v1::LinkCheckSummary s = c.Summarize();
    ASSERT_EQ(s.slow_size(), n);
    for (const v1::LinkState& l : s.slow()) {
      const int edge = std::stoi(l.group().substr(2));
      std::vector<double> others;
      for (int j = 0; j < n; ++j) {
        if (j != edge) others.push_back(gbps[j] * 1e9);
      }
      std::sort(others.begin(), others.end());
      const size_t m = others.size();
      const double median = m % 2 ? others[m / 2] : (others[m / 2 - 1] + others[m / 2]) / 2;
      EXPECT_NEAR(l.baseline_bytes_per_second(), median, 1) << "n " << n << " edge " << edge;
    }
  }
}

TEST(LinkAnalysisTest, OnlyTheFourGroupKindsAreTaken) {
  EXPECT_EQ(GroupKind("dp12"), "dp");
  EXPECT_EQ(GroupKind("emb0"), "emb");
  EXPECT_EQ(GroupKind("world"), "world");
  EXPECT_EQ(GroupKind("7"), "");
  for (const char* ok : {"tp0", "pp12", "dp3", "emb1"}) EXPECT_TRUE(IsLinkGroupName(ok)) << ok;
  for (const char* bad : {"world", "dp", "bench0", "x1", "7", ""}) {
    EXPECT_FALSE(IsLinkGroupName(bad)) << bad;
  }
  LinkCheckCollector c(1, /*step=*/0, 2, 0.5, /*floor=*/0);
  EXPECT_TRUE(c.Add(0, {Sample("world", 0, "a", 1, "b", 1), Sample("tp0", 0, "a", 1, "a", 9)}));
  const v1::LinkCheckSummary s = c.Summarize();
  ASSERT_EQ(s.classes_size(), 1);
  EXPECT_EQ(s.classes(0).kind(), "tp");
}

}  // namespace
}  // namespace ringmaster::coordinator
