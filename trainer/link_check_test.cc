// The link check: its schedule of ring edges, a real check between ranks connected by Gloo over
// loopback, and its data check (through a fake link that corrupts one element).
#include "trainer/link_check.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "trainer/comm/key_value_store.h"
#include "trainer/comm/testing.h"
#include "trainer/model/cpu_device.h"
#include "trainer/parallel/parallel_groups.h"

namespace ringmaster::trainer {
namespace {

TEST(RingRoundsTest, EveryRingEdgeOnceAndNoRankTwiceInARound) {
  EXPECT_TRUE(RingRounds(1).empty());
  ASSERT_EQ(RingRounds(2).size(), 1u);
  EXPECT_EQ(RingRounds(2)[0], (std::vector<std::pair<int, int>>{{0, 1}}));
  for (int n = 3; n <= 9; ++n) {
    const auto rounds = RingRounds(n);
    EXPECT_EQ(rounds.size(), n % 2 == 0 ? 2u : 3u) << n;
    std::set<std::pair<int, int>> edges;
    for (const auto& round : rounds) {
      std::set<int> seen;
      for (const auto& [a, b] : round) {
        EXPECT_LT(a, b) << n;
        EXPECT_TRUE(seen.insert(a).second) << "rank " << a << " twice in a round, n " << n;
        EXPECT_TRUE(seen.insert(b).second) << "rank " << b << " twice in a round, n " << n;
        EXPECT_TRUE(edges.insert({a, b}).second) << "edge measured twice, n " << n;
      }
    }
    std::set<std::pair<int, int>> ring;
    for (int i = 0; i < n; ++i) ring.insert({std::min(i, (i + 1) % n), std::max(i, (i + 1) % n)});
    EXPECT_EQ(edges, ring) << n;
  }
}

// Three ranks (global ranks 10, 11, 12) in one group over loopback Gloo: each measures its two
// neighbours with intact data, and the probe stays out of the group's totals but not out of its
// sequence numbers.
TEST(CheckLinksTest, EachRankMeasuresItsRingNeighboursOverARealTransport) {
  constexpr int kRanks = 3;
  InMemoryStore store;
  absl::Mutex mu;
  std::map<int, std::vector<LinkResult>> results;
  std::map<int, int64_t> entered;
  std::map<int, size_t> totals_left;
  auto statuses = testing::RunRanks(kRanks, [&](int rank) -> absl::Status {
    auto comm = testing::ConnectLoopback("dp0", rank, kRanks, &store);
    if (!comm.ok()) return comm.status();
    auto device = MakeCpuDevice(1);
    LinkCheckOptions options;
    options.bytes = 64 << 10;
    auto r = CheckLinks(*device, {{comm->get(), {10, 11, 12}}}, options);
    if (!r.ok()) return r.status();
    absl::MutexLock lock(&mu);
    results[rank] = *r;
    entered[rank] = (*comm)->entered();
    totals_left[rank] = (*comm)->TakeTotals().size();
    return absl::OkStatus();
  });
  for (const auto& s : statuses) ASSERT_TRUE(s.ok()) << s;
  for (int rank = 0; rank < kRanks; ++rank) {
    std::set<int> peers;
    for (const LinkResult& link : results[rank]) {
      EXPECT_EQ(link.group, "dp0");
      EXPECT_EQ(link.bytes, 64 << 10);
      EXPECT_GT(link.seconds, 0);
      EXPECT_EQ(link.wrong, 0) << "rank " << rank << " from " << link.peer_rank;
      peers.insert(link.peer_rank);
    }
    const std::set<int> neighbours = {10 + (rank + 1) % kRanks, 10 + (rank + 2) % kRanks};
    EXPECT_EQ(peers, neighbours) << rank;
    EXPECT_EQ(totals_left[rank], 0u) << rank;
    // Two edges, each one warm-up and three timed exchanges, on every rank alike.
    EXPECT_EQ(entered[rank], 8) << rank;
  }
}

// Every rank of a tp x pp x dp job checks all its groups (tp, pp, dp, and emb on the first and
// last stages) in GroupsOf order over real loopback Gloo communicators, concurrently: no rank
// waits forever, and each measures exactly its ring neighbours in each group, with intact data.
// 2x2x2: four groups of two per rank (emb is the same pair as pp); 1x3x2: a group of one (tp),
// an odd pipeline ring of three and a middle stage without an emb group.
TEST(CheckLinksTest, EveryGroupOfEveryRankOfAThreeDimensionalJob) {
  for (const auto& [tp, pp, dp] : {std::tuple{2, 2, 2}, std::tuple{1, 3, 2}}) {
    const int world = tp * pp * dp;
    InMemoryStore store;
    absl::Mutex mu;
    std::map<int, std::map<std::string, std::set<int>>> measured;  // rank -> group -> peers
    std::map<int, std::map<std::string, std::set<int>>> expected;
    auto statuses = testing::RunRanks(world, [&](int rank) -> absl::Status {
      std::vector<std::unique_ptr<Communicator>> comms;
      std::vector<LinkCheckGroup> groups;
      std::map<std::string, std::set<int>> want;
      for (const GroupMembership& m : GroupsOf(RankPlace::Of(rank, tp, pp, dp))) {
        auto comm = testing::ConnectLoopback(m.name, m.rank, m.size, &store);
        if (!comm.ok()) return comm.status();
        groups.push_back({comm->get(), m.members});
        comms.push_back(std::move(*comm));
        for (int step : {1, m.size - 1}) {
          if (m.size > 1) want[m.name].insert(m.members[(m.rank + step) % m.size]);
        }
      }
      auto device = MakeCpuDevice(1);
      LinkCheckOptions options;
      options.bytes = 4096;
      auto r = CheckLinks(*device, groups, options);
      if (!r.ok()) return r.status();
      absl::MutexLock lock(&mu);
      for (const LinkResult& link : *r) {
        EXPECT_EQ(link.wrong, 0) << "rank " << rank << " " << link.group;
        measured[rank][link.group].insert(link.peer_rank);
      }
      expected[rank] = want;
      return absl::OkStatus();
    });
    for (const auto& s : statuses) ASSERT_TRUE(s.ok()) << s;
    for (int rank = 0; rank < world; ++rank) {
      EXPECT_EQ(measured[rank], expected[rank]) << tp << "x" << pp << "x" << dp << " rank " << rank;
      EXPECT_FALSE(expected[rank].empty());
    }
  }
}

// A group of one rank has no link; groups are taken in order and a size mismatch is an error.
TEST(CheckLinksTest, SingleRankGroupsHaveNoLinksAndMembersMustMatchTheGroup) {
  InMemoryStore store;
  auto comm = testing::ConnectLoopback("tp0", 0, 1, &store);
  ASSERT_TRUE(comm.ok()) << comm.status();
  auto device = MakeCpuDevice(1);
  auto none = CheckLinks(*device, {{comm->get(), {4}}}, {});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(CheckLinks(*device, {{comm->get(), {4, 5}}}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A two-member link that hands a rank back its own buffer with element `corrupt` changed: with
// both members named as the same global rank, the pattern matches everywhere else.
class CorruptingLink final : public Communicator {
 public:
  CorruptingLink(int rank, int64_t corrupt) : Communicator("pp3", rank, 2), corrupt_(corrupt) {}
  const char* transport() const override { return "fake"; }

 protected:
  absl::Status DoAllReduce(Tensor) override { return Unused(); }
  absl::Status DoReduceScatter(Tensor, Tensor) override { return Unused(); }
  absl::Status DoAllGather(Tensor, Tensor) override { return Unused(); }
  absl::Status DoBroadcast(Tensor, int) override { return Unused(); }
  absl::Status DoSend(Tensor, int) override { return Unused(); }
  absl::Status DoRecv(Tensor, int) override { return Unused(); }
  absl::Status DoExchange(Tensor send, Tensor recv, int) override {
    std::memcpy(recv.data, send.data, send.bytes());
    if (corrupt_ >= 0) recv.f32()[corrupt_] += 1;
    return absl::OkStatus();
  }
  absl::Status DoBarrier() override { return absl::OkStatus(); }

 private:
  static absl::Status Unused() { return absl::UnimplementedError("not used by the link check"); }
  const int64_t corrupt_;
};

// Over a real loopback pair (global ranks 5 and 6): --corrupt_link=5:6 changes one element of what
// rank 6 receives from rank 5, and nothing of what rank 5 receives.
TEST(CheckLinksTest, TheCorruptLinkInjectionChangesOnlyWhatTheNamedRankReceivesFromTheOther) {
  InMemoryStore store;
  int64_t wrong[2] = {-1, -1};
  auto statuses = testing::RunRanks(2, [&](int rank) -> absl::Status {
    auto comm = testing::ConnectLoopback("dp0", rank, 2, &store);
    if (!comm.ok()) return comm.status();
    auto device = MakeCpuDevice(1);
    LinkCheckOptions options;
    options.bytes = 4096;
    options.corrupt_from = 5;
    options.corrupt_to = 6;
    auto r = CheckLinks(*device, {{comm->get(), {5, 6}}}, options);
    if (!r.ok()) return r.status();
    wrong[rank] = (*r)[0].wrong;
    return absl::OkStatus();
  });
  for (const auto& s : statuses) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(wrong[0], 0);  // rank 5, from 6
  EXPECT_EQ(wrong[1], 1);  // rank 6, from 5
}

TEST(CheckLinksTest, DataThatArrivesChangedIsCountedAsWrong) {
  auto device = MakeCpuDevice(1);
  LinkCheckOptions options;
  options.bytes = 4096;
  for (int64_t corrupt : {int64_t{-1}, int64_t{0}, int64_t{1023}}) {
    CorruptingLink link(/*rank=*/0, corrupt);
    auto r = CheckLinks(*device, {{&link, {7, 7}}}, options);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].group, "pp3");
    EXPECT_EQ((*r)[0].peer_rank, 7);
    EXPECT_EQ((*r)[0].wrong, corrupt < 0 ? 0 : 1) << corrupt;
  }
}

}  // namespace
}  // namespace ringmaster::trainer
