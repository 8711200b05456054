// Gloo communicators among threads of one process over loopback: every operation's result for
// several group sizes, sequence numbers and totals, point-to-point ordering, and failures that
// must surface as errors (a member that never joins, a member that goes away) rather than hangs.
#include "trainer/comm/gloo_communicator.h"

#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/comm/testing.h"

namespace ringmaster::trainer {
namespace {

using testing::ConnectLoopback;
using testing::RunRanks;

Tensor View(std::vector<float>& v) { return Tensor{v.data(), static_cast<int64_t>(v.size())}; }

void ExpectAllOk(const std::vector<absl::Status>& results) {
  for (size_t r = 0; r < results.size(); ++r) EXPECT_TRUE(results[r].ok()) << r << results[r];
}

// Group size, and whether the group is a ring (GlooNetwork::ConnectRing) or a full mesh.
class GlooGroupTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(GlooGroupTest, CollectivesComputeTheRightData) {
  const auto [n, ring] = GetParam();
  InMemoryStore store;
  ExpectAllOk(RunRanks(n, [&, n = n, ring = ring](int rank) -> absl::Status {
    auto comm = ConnectLoopback("g", rank, n, &store, absl::Seconds(30), ring);
    if (!comm.ok()) return comm.status();
    Communicator& c = **comm;
    // All-reduce of 1000 + a size not divisible by n.
    std::vector<float> data(1003);
    for (size_t i = 0; i < data.size(); ++i) data[i] = rank * 1000.0f + i;
    if (auto s = c.AllReduce(View(data)); !s.ok()) return s;
    for (size_t i = 0; i < data.size(); ++i) {
      const float want = 1000.0f * n * (n - 1) / 2 + n * static_cast<float>(i);
      if (data[i] != want) return absl::InternalError("all_reduce wrong");
    }
    // Reduce-scatter: chunk r of the sum lands on rank r.
    const int chunk = 37;
    std::vector<float> in(chunk * n), out(chunk);
    for (size_t i = 0; i < in.size(); ++i) in[i] = (rank + 1) * static_cast<float>(i);
    if (auto s = c.ReduceScatter(View(in), View(out)); !s.ok()) return s;
    for (int i = 0; i < chunk; ++i) {
      const float want = static_cast<float>(n * (n + 1) / 2) * (rank * chunk + i);
      if (out[i] != want) return absl::InternalError("reduce_scatter wrong");
    }
    // All-gather, in place from the own chunk.
    std::vector<float> gathered(chunk * n, -1.0f);
    for (int i = 0; i < chunk; ++i) gathered[rank * chunk + i] = rank * 100.0f + i;
    Tensor all = View(gathered);
    if (auto s = c.AllGather(all.Slice(rank * chunk, chunk), all); !s.ok()) return s;
    for (int r = 0; r < n; ++r) {
      for (int i = 0; i < chunk; ++i) {
        if (gathered[r * chunk + i] != r * 100.0f + i) return absl::InternalError("all_gather");
      }
    }
    // Broadcast from the last rank.
    std::vector<float> b(5, static_cast<float>(rank));
    if (auto s = c.Broadcast(View(b), n - 1); !s.ok()) return s;
    if (b != std::vector<float>(5, static_cast<float>(n - 1))) {
      return absl::InternalError("broadcast wrong");
    }
    if (auto s = c.Barrier(); !s.ok()) return s;
    if (c.entered() != 4 || c.completed() != 4) return absl::InternalError("sequence numbers");
    std::vector<OpTotals> totals = c.TakeTotals();
    if (totals.size() != 4 || totals[0].op != CollectiveOp::kAllReduce ||
        totals[0].bytes != 1003 * 4 || totals[1].bytes != chunk * n * 4 ||
        totals[2].bytes != chunk * n * 4 || totals[3].bytes != 20) {
      return absl::InternalError("totals wrong");
    }
    if (!c.TakeTotals().empty()) return absl::InternalError("totals not cleared");
    return absl::OkStatus();
  }));
}

INSTANTIATE_TEST_SUITE_P(SizesAndTopologies, GlooGroupTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5), ::testing::Bool()));

// Which side of a Gloo pair waits for the other in connect() follows the pairs' ports, which fall
// as they may: with the neighbours connected in the wrong order, a ring of three deadlocks one
// time in eight (every member waiting on the same side). Many rings, each with a short timeout.
TEST(GlooCommunicatorTest, RingsConnectWhicheverSideOfEachPairWaits) {
  for (int round = 0; round < 48; ++round) {
    InMemoryStore store;
    std::vector<absl::Status> results = RunRanks(3, [&](int rank) -> absl::Status {
      auto comm = ConnectLoopback("ring", rank, 3, &store, absl::Seconds(10), /*ring=*/true);
      if (!comm.ok()) return comm.status();
      return (*comm)->Barrier();
    });
    for (size_t r = 0; r < results.size(); ++r) {
      ASSERT_TRUE(results[r].ok()) << "round " << round << " rank " << r << ": " << results[r];
    }
  }
}

// A store that counts what it is asked for.
class CountingStore final : public KeyValueStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    absl::MutexLock lock(&mu_);
    ++sets_;
    bytes_set_ += static_cast<int64_t>(value.size());
    return inner_.Set(key, value);
  }
  absl::StatusOr<std::string> Wait(const std::string& key, absl::Duration timeout) override {
    {
      absl::MutexLock lock(&mu_);
      ++waits_;
    }
    return inner_.Wait(key, timeout);
  }
  int64_t sets() {
    absl::MutexLock lock(&mu_);
    return sets_;
  }
  int64_t waits() {
    absl::MutexLock lock(&mu_);
    return waits_;
  }
  int64_t bytes_set() {
    absl::MutexLock lock(&mu_);
    return bytes_set_;
  }

 private:
  InMemoryStore inner_;
  absl::Mutex mu_;
  int64_t sets_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t waits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_set_ ABSL_GUARDED_BY(mu_) = 0;
};

// A ring group's members publish one record of two addresses each and read two records, where
// a full mesh's publish size - 1 addresses and read size - 1 records of size - 1: the ring joins
// thousands of ranks through the coordinator's store, which a mesh would overflow. Broadcasts
// from every root arrive, and point-to-point reaches the neighbours only.
TEST(GlooCommunicatorTest, ARingGroupJoinsThroughTwoRecordsPerMember) {
  const int n = 6;
  CountingStore ring_store, mesh_store;
  ExpectAllOk(RunRanks(n, [&](int rank) -> absl::Status {
    auto mesh = ConnectLoopback("mesh", rank, n, &mesh_store);
    if (!mesh.ok()) return mesh.status();
    auto comm = ConnectLoopback("ring", rank, n, &ring_store, absl::Seconds(30), /*ring=*/true);
    if (!comm.ok()) return comm.status();
    Communicator& c = **comm;
    for (int root = 0; root < n; ++root) {
      std::vector<float> b(3, static_cast<float>(rank));
      if (auto s = c.Broadcast(View(b), root); !s.ok()) return s;
      if (b != std::vector<float>(3, static_cast<float>(root))) {
        return absl::InternalError(absl::StrCat("broadcast from ", root));
      }
    }
    bool flags[2] = {rank == 4, false};
    if (auto s = c.AnyOf(absl::MakeSpan(flags)); !s.ok()) return s;
    if (!flags[0] || flags[1]) return absl::InternalError("any_of");
    // The neighbours exchange; a rank two steps away is refused, naming the ring.
    const int right = (rank + 1) % n, left = (rank + n - 1) % n;
    std::vector<float> out(4, static_cast<float>(rank)), in(4, -1);
    if (rank % 2 == 0) {
      if (auto s = c.Exchange(View(out), View(in), right); !s.ok()) return s;
      if (in[0] != right) return absl::InternalError("exchange to the right");
    } else {
      if (auto s = c.Exchange(View(out), View(in), left); !s.ok()) return s;
      if (in[0] != left) return absl::InternalError("exchange to the left");
    }
    absl::Status far = c.Send(View(out), (rank + 2) % n);
    if (!absl::IsFailedPrecondition(far) ||
        far.message().find("group ring is a ring: rank") == std::string::npos) {
      return absl::InternalError(absl::StrCat("send two steps away: ", far.ToString()));
    }
    return absl::OkStatus();
  }));
  EXPECT_EQ(ring_store.sets(), n);
  EXPECT_EQ(ring_store.waits(), 2 * n);
  // Gloo's mesh reads every other member's record (some twice).
  EXPECT_GE(mesh_store.waits(), n * (n - 1));
  // Two addresses a record, against n - 1 = 5.
  EXPECT_LT(2 * ring_store.bytes_set(), mesh_store.bytes_set())
      << ring_store.bytes_set() << " vs " << mesh_store.bytes_set();
}

TEST(GlooCommunicatorTest, PointToPointKeepsOrderPerPair) {
  InMemoryStore store;
  ExpectAllOk(RunRanks(3, [&](int rank) -> absl::Status {
    auto comm = ConnectLoopback("p2p", rank, 3, &store);
    if (!comm.ok()) return comm.status();
    // Rank 0 sends three messages to rank 2 and one to rank 1; receivers check the order.
    if (rank == 0) {
      for (float v : {1.0f, 2.0f, 3.0f}) {
        std::vector<float> m(4, v);
        if (auto s = (*comm)->Send(View(m), 2); !s.ok()) return s;
      }
      std::vector<float> m(2, 9.0f);
      return (*comm)->Send(View(m), 1);
    }
    if (rank == 1) {
      std::vector<float> m(2);
      if (auto s = (*comm)->Recv(View(m), 0); !s.ok()) return s;
      return m[1] == 9.0f ? absl::OkStatus() : absl::InternalError("wrong message");
    }
    for (float v : {1.0f, 2.0f, 3.0f}) {
      std::vector<float> m(4);
      if (auto s = (*comm)->Recv(View(m), 0); !s.ok()) return s;
      if (m != std::vector<float>(4, v)) return absl::InternalError("out of order");
    }
    return absl::OkStatus();
  }));
}

// Two neighbours pass data towards each other at the same moment (a pipeline's activations one
// way, gradients the other): blocking sends on both sides would wait for each other forever;
// Exchange posts both transfers first. It also matches a plain Recv + Send on the other side.
TEST(GlooCommunicatorTest, ExchangeCrossesTransfersWithoutDeadlock) {
  InMemoryStore store;
  ExpectAllOk(RunRanks(2, [&](int rank) -> absl::Status {
    auto comm = ConnectLoopback("xchg", rank, 2, &store);
    if (!comm.ok()) return comm.status();
    Communicator& c = **comm;
    const int peer = 1 - rank;
    for (int round = 0; round < 3; ++round) {
      // Large enough that a send cannot complete into a socket buffer on its own.
      std::vector<float> out(1 << 18, static_cast<float>(10 * rank + round)), in(1 << 18, -1);
      if (auto s = c.Exchange(View(out), View(in), peer); !s.ok()) return s;
      if (in != std::vector<float>(1 << 18, static_cast<float>(10 * peer + round))) {
        return absl::InternalError("exchange delivered the wrong data");
      }
    }
    // Rank 0 exchanges; rank 1 receives first, then sends.
    std::vector<float> a(8, static_cast<float>(rank + 1)), b(8, 0);
    if (rank == 0) {
      if (auto s = c.Exchange(View(a), View(b), 1); !s.ok()) return s;
    } else {
      if (auto s = c.Recv(View(b), 0); !s.ok()) return s;
      if (auto s = c.Send(View(a), 0); !s.ok()) return s;
    }
    if (b != std::vector<float>(8, static_cast<float>(peer + 1))) {
      return absl::InternalError("exchange with recv + send");
    }
    // One operation each, counted as a send and a receive.
    if (c.entered() != 3 + (rank == 0 ? 1 : 2)) return absl::InternalError("sequence numbers");
    std::vector<OpTotals> totals = c.TakeTotals();
    if (totals.size() != 2 || totals[0].op != CollectiveOp::kSend || totals[0].count != 4 ||
        totals[0].bytes != 3 * (4 << 18) + 32 || totals[1].op != CollectiveOp::kRecv ||
        totals[1].bytes != 3 * (4 << 18) + 32) {
      return absl::InternalError("exchange totals");
    }
    return absl::OkStatus();
  }));
}

TEST(GlooCommunicatorTest, AMemberThatNeverJoinsIsADeadlineNotAHang) {
  InMemoryStore store;
  auto comm = ConnectLoopback("lonely", 0, 2, &store, absl::Milliseconds(300));
  ASSERT_FALSE(comm.ok());
  EXPECT_THAT(comm.status().message(), ::testing::HasSubstr("connecting group lonely"));
  EXPECT_TRUE(absl::IsUnavailable(comm.status())) << comm.status();
}

TEST(GlooCommunicatorTest, ALostPeerFailsTheCollectiveWithUnavailable) {
  InMemoryStore store;
  std::vector<absl::Status> results = RunRanks(2, [&](int rank) -> absl::Status {
    auto comm = ConnectLoopback("lost", rank, 2, &store, absl::Seconds(20));
    if (!comm.ok()) return comm.status();
    if (rank == 1) {
      // Leave only once rank 0 is connected too (or its connect would be what fails).
      if (auto up = store.Wait("connected", absl::Seconds(20)); !up.ok()) return up.status();
      comm->reset();  // closes its connections: the peer is gone
      return store.Set("gone", "1");
    }
    if (auto s = store.Set("connected", "1"); !s.ok()) return s;
    if (auto gone = store.Wait("gone", absl::Seconds(20)); !gone.ok()) return gone.status();
    std::vector<float> data(1 << 16, 1.0f);
    absl::Status s = (*comm)->AllReduce(View(data));
    if (s.ok()) return absl::InternalError("all_reduce with a lost peer succeeded");
    if (!absl::IsUnavailable(s)) return s;
    if ((*comm)->entered() != 1 || (*comm)->completed() != 0) {
      return absl::InternalError("sequence numbers after a failure");
    }
    return absl::OkStatus();
  });
  ExpectAllOk(results);
}

TEST(GlooCommunicatorTest, MismatchedSizesAreInvalidArguments) {
  InMemoryStore store;
  auto comm = ConnectLoopback("one", 0, 1, &store);
  ASSERT_TRUE(comm.ok());
  std::vector<float> a(10), b(3);
  EXPECT_TRUE(absl::IsInvalidArgument((*comm)->ReduceScatter(View(a), View(b))));
  EXPECT_TRUE(absl::IsInvalidArgument((*comm)->AllGather(View(a), View(b))));
  EXPECT_TRUE(absl::IsInvalidArgument((*comm)->Send(View(a), 0)));
  EXPECT_TRUE(absl::IsInvalidArgument((*comm)->Broadcast(View(a), 1)));
}

}  // namespace
}  // namespace ringmaster::trainer
