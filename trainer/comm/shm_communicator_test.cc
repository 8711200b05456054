// Shared-memory collectives among threads of one process (the segment is shared memory all the
// same): every operation's data for several group sizes, buffers larger than a slot (chunked),
// in-place reduce-scatter and all-gather, and a member that never arrives.
#include "trainer/comm/shm_communicator.h"

#include <vector>

#include "gtest/gtest.h"
#include "trainer/comm/connect_group.h"
#include "trainer/comm/testing.h"

namespace ringmaster::trainer {
namespace {

Tensor View(std::vector<float>& v) { return Tensor{v.data(), static_cast<int64_t>(v.size())}; }

absl::StatusOr<std::unique_ptr<Communicator>> Shm(const std::string& name, int rank, int size,
                                                  InMemoryStore* store, int64_t slot_floats,
                                                  absl::Duration timeout = absl::Seconds(30)) {
  auto gloo = testing::ConnectLoopback(name, rank, size, store, timeout);
  if (!gloo.ok()) return gloo.status();
  ShmOptions options;
  options.slot_floats = slot_floats;
  options.timeout = timeout;
  return ConnectSharedMemory(name, rank, size, store, std::move(*gloo), options);
}

class ShmGroupTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmGroupTest, CollectivesComputeTheRightDataAcrossChunks) {
  const int n = GetParam();
  InMemoryStore store;
  auto results = testing::RunRanks(n, [&](int rank) -> absl::Status {
    auto comm = Shm("g", rank, n, &store, /*slot_floats=*/96);  // forces several chunks
    if (!comm.ok()) return comm.status();
    Communicator& c = **comm;
    std::vector<float> data(1003);
    for (size_t i = 0; i < data.size(); ++i) data[i] = rank * 1000.0f + i;
    if (auto s = c.AllReduce(View(data)); !s.ok()) return s;
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i] != 1000.0f * n * (n - 1) / 2 + n * static_cast<float>(i)) {
        return absl::InternalError("all_reduce wrong");
      }
    }
    // In-place reduce-scatter: the output is this rank's chunk of the input.
    const int chunk = 77;
    std::vector<float> buf(chunk * n);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = (rank + 1) * static_cast<float>(i);
    Tensor whole = View(buf);
    if (auto s = c.ReduceScatter(whole, whole.Slice(rank * chunk, chunk)); !s.ok()) return s;
    for (int i = 0; i < chunk; ++i) {
      if (buf[rank * chunk + i] != static_cast<float>(n * (n + 1) / 2) * (rank * chunk + i)) {
        return absl::InternalError("reduce_scatter wrong");
      }
    }
    // In-place all-gather of int32 (the dtype only sets the element size).
    std::vector<int32_t> ids(chunk * n, -1);
    for (int i = 0; i < chunk; ++i) ids[rank * chunk + i] = rank * 100 + i;
    Tensor all{ids.data(), chunk * n, DType::kI32};
    if (auto s = c.AllGather(all.Slice(rank * chunk, chunk), all); !s.ok()) return s;
    for (int r = 0; r < n; ++r) {
      for (int i = 0; i < chunk; ++i) {
        if (ids[r * chunk + i] != r * 100 + i) return absl::InternalError("all_gather wrong");
      }
    }
    std::vector<float> b(500, static_cast<float>(rank));
    if (auto s = c.Broadcast(View(b), n - 1); !s.ok()) return s;
    if (b != std::vector<float>(500, static_cast<float>(n - 1))) {
      return absl::InternalError("broadcast wrong");
    }
    if (n > 1) {  // point to point goes through Gloo
      std::vector<float> msg(8, static_cast<float>(rank));
      if (rank == 0) {
        if (auto s = c.Send(View(msg), 1); !s.ok()) return s;
      } else if (rank == 1) {
        if (auto s = c.Recv(View(msg), 0); !s.ok()) return s;
        if (msg[0] != 0.0f) return absl::InternalError("recv wrong");
      }
    }
    if (c.entered() != (n > 1 && rank < 2 ? 5 : 4)) return absl::InternalError("sequence");
    return c.Barrier();
  });
  for (size_t r = 0; r < results.size(); ++r) EXPECT_TRUE(results[r].ok()) << r << results[r];
}

INSTANTIATE_TEST_SUITE_P(Sizes, ShmGroupTest, ::testing::Values(1, 2, 3, 4));

TEST(ShmCommunicatorTest, AllReduceIsBitwiseTheSameOnEveryRank) {
  InMemoryStore store;
  std::vector<std::vector<float>> out(3);
  testing::RunRanks(3, [&](int rank) -> absl::Status {
    auto comm = Shm("bits", rank, 3, &store, 1 << 10);
    if (!comm.ok()) return comm.status();
    std::vector<float> data(5000);
    for (size_t i = 0; i < data.size(); ++i) data[i] = 0.1f * (rank + 1) + 1e-3f * i;
    absl::Status s = (*comm)->AllReduce(View(data));
    out[rank] = data;
    return s;
  });
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(out[0], out[2]);
}

TEST(ShmCommunicatorTest, AMemberThatNeverArrivesIsADeadline) {
  InMemoryStore store;
  auto results = testing::RunRanks(2, [&](int rank) -> absl::Status {
    auto comm = Shm("late", rank, 2, &store, 64, absl::Milliseconds(300));
    if (!comm.ok()) return comm.status();
    if (rank == 1) return absl::OkStatus();  // never joins the all-reduce
    std::vector<float> data(10, 1.0f);
    return (*comm)->AllReduce(View(data));
  });
  EXPECT_TRUE(absl::IsDeadlineExceeded(results[0])) << results[0];
}

// Two members on this machine with the nodes the coordinator placed them on: they share memory
// only when the nodes are the same (or neither has one: a trainer run without an agent).
// Different nodes (two agents on one host, in separate network namespaces) connect over Gloo,
// so the bytes take the link between the nodes.
struct NodesCase {
  std::string node0, node1;
  bool shm;
};

class ConnectGroupTest : public ::testing::TestWithParam<NodesCase> {};

TEST_P(ConnectGroupTest, OnlyMembersOfOneNodeShareMemory) {
  const NodesCase& c = GetParam();
  InMemoryStore store;
  std::string transports[2];
  auto results = testing::RunRanks(2, [&](int rank) -> absl::Status {
    auto network = GlooNetwork::Create("127.0.0.1");
    if (!network.ok()) return network.status();
    auto comm = ConnectGroup(**network, "dp0", rank, 2, &store, absl::Seconds(30), true,
                             rank == 0 ? c.node0 : c.node1);
    if (!comm.ok()) return comm.status();
    transports[rank] = (*comm)->transport();
    std::vector<float> data(4, 1.0f);
    if (auto s = (*comm)->AllReduce(View(data)); !s.ok()) return s;
    return data[3] == 2.0f ? absl::OkStatus() : absl::InternalError("wrong sum");
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  const std::string want = c.shm ? "shm" : "gloo";
  EXPECT_EQ(transports[0], want) << "nodes \"" << c.node0 << "\" and \"" << c.node1 << "\"";
  EXPECT_EQ(transports[1], want);
  // The segment's name goes through the store on the shared-memory path only.
  EXPECT_EQ(store.Wait("shm/dp0", absl::ZeroDuration()).ok(), c.shm);
}

INSTANTIATE_TEST_SUITE_P(Nodes, ConnectGroupTest,
                         ::testing::Values(NodesCase{"", "", true},
                                           NodesCase{"node-a", "node-a", true},
                                           NodesCase{"node-a", "node-b", false},
                                           NodesCase{"node-a", "", false}));

TEST(NodeIdentityTest, TheNodeIsPartOfTheIdentity) {
  EXPECT_EQ(NodeIdentity(""), MachineIdentity());
  EXPECT_NE(NodeIdentity("a"), NodeIdentity("b"));
  EXPECT_NE(NodeIdentity("a"), MachineIdentity());
  EXPECT_EQ(NodeIdentity("a"), NodeIdentity("a"));
}

}  // namespace
}  // namespace ringmaster::trainer
