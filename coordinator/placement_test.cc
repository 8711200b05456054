#include "coordinator/placement.h"

#include <algorithm>
#include <map>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

// A node with `devices` free devices 0..devices-1, split evenly over `domains` domains.
NodeCapacity Node(const std::string& name, int devices, int domains = 1) {
  NodeCapacity node{name, {}};
  for (int i = 0; i < devices; ++i) node.free.push_back({i, i * domains / devices});
  return node;
}

Layout MakeLayout(int nodes, int devices_per_node, int tensor, int pipeline, int data) {
  Layout layout;
  layout.nodes = nodes;
  layout.devices_per_node = devices_per_node;
  layout.tensor = tensor;
  layout.pipeline = pipeline;
  layout.data = data;
  return layout;
}

std::vector<int> Ranks(const v1::RankGroup& group) {
  return std::vector<int>(group.ranks().begin(), group.ranks().end());
}

std::vector<std::string> Names(const google::protobuf::RepeatedPtrField<v1::RankGroup>& groups) {
  std::vector<std::string> names;
  for (const v1::RankGroup& g : groups) names.push_back(g.name());
  return names;
}

// Checks the invariants every placement must hold, whatever the inputs.
void ExpectValid(const Placement& p, const Layout& layout, const std::vector<NodeCapacity>& nodes) {
  std::map<std::pair<std::string, int>, int> domain_of;  // (node, device) -> domain.
  for (const NodeCapacity& n : nodes) {
    for (const FreeDevice& d : n.free) domain_of[{n.name, d.index}] = d.domain;
  }
  const int world = layout.nodes * layout.devices_per_node;
  ASSERT_EQ(static_cast<int>(p.assignments.size()), world);
  ASSERT_EQ(static_cast<int>(p.nodes.size()), layout.nodes);
  EXPECT_EQ(std::set<std::string>(p.nodes.begin(), p.nodes.end()).size(), p.nodes.size());

  std::set<std::pair<std::string, int>> used;
  std::map<std::string, std::vector<int>> local_ranks;  // node -> local_rank by ascending rank.
  for (int rank = 0; rank < world; ++rank) {
    const v1::RankAssignment& a = p.assignments[rank];
    ASSERT_EQ(a.rank(), rank);
    EXPECT_EQ(rank, (a.dp_rank() * layout.pipeline + a.pp_rank()) * layout.tensor + a.tp_rank());
    const std::pair<std::string, int> device{a.node(), a.local_device()};
    EXPECT_TRUE(domain_of.count(device)) << a.node() << "/" << a.local_device() << " is not free";
    EXPECT_TRUE(used.insert(device).second) << a.node() << "/" << a.local_device() << " twice";
    local_ranks[a.node()].push_back(a.local_rank());
    // Each TP group lies on one node and in one domain (compare with the group's first rank).
    const v1::RankAssignment& head = p.assignments[rank - a.tp_rank()];
    EXPECT_EQ(a.node(), head.node()) << "rank " << rank;
    EXPECT_EQ(domain_of[device], (domain_of[{head.node(), head.local_device()}]))
        << "rank " << rank;
  }
  ASSERT_EQ(local_ranks.size(), static_cast<size_t>(layout.nodes));
  for (const auto& [node, locals] : local_ranks) {
    std::vector<int> want(layout.devices_per_node);
    for (int i = 0; i < layout.devices_per_node; ++i) want[i] = i;
    EXPECT_EQ(locals, want) << "local ranks on " << node;
  }
}

std::vector<std::string> NodesOfRanks(const Placement& p) {
  std::vector<std::string> out;
  for (const v1::RankAssignment& a : p.assignments) out.push_back(a.node());
  return out;
}

std::vector<int> DevicesOfRanks(const Placement& p) {
  std::vector<int> out;
  for (const v1::RankAssignment& a : p.assignments) out.push_back(a.local_device());
  return out;
}

std::vector<int> LocalRanks(const Placement& p) {
  std::vector<int> out;
  for (const v1::RankAssignment& a : p.assignments) out.push_back(a.local_rank());
  return out;
}

TEST(PlaceTest, OneDevice) {
  std::vector<NodeCapacity> nodes = {Node("n0", 1)};
  absl::StatusOr<Placement> p = Place(nodes, MakeLayout(1, 1, 1, 1, 1), {});
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectValid(*p, MakeLayout(1, 1, 1, 1, 1), nodes);
  EXPECT_THAT(p->nodes, ElementsAre("n0"));
  const v1::RankAssignment& a = p->assignments[0];
  EXPECT_EQ(a.node(), "n0");
  EXPECT_EQ(a.local_device(), 0);
  EXPECT_EQ(a.local_rank(), 0);
  EXPECT_EQ(a.tp_rank() + a.pp_rank() + a.dp_rank(), 0);
  ASSERT_EQ(p->groups.tensor_size(), 1);
  EXPECT_EQ(p->groups.tensor(0).name(), "tp0");
  EXPECT_EQ(p->groups.pipeline(0).name(), "pp0");
  EXPECT_EQ(p->groups.data(0).name(), "dp0");
  EXPECT_THAT(Ranks(p->groups.data(0)), ElementsAre(0));
}

TEST(PlaceTest, TwoByTwoByTwoOnTwoNodesOfFour) {
  // Two nodes of 4 devices, each in two domains of 2 (devices 0,1 | 2,3).
  std::vector<NodeCapacity> nodes = {Node("b", 4, 2), Node("a", 4, 2)};
  const Layout layout = MakeLayout(2, 4, /*tensor=*/2, /*pipeline=*/2, /*data=*/2);
  absl::StatusOr<Placement> p = Place(nodes, layout, {});
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectValid(*p, layout, nodes);

  // Equal free counts: "a" before "b". Stage-major: a holds stage 0 of replicas 0 and 1
  // (ranks 0,1 | 4,5), b holds stage 1 (ranks 2,3 | 6,7); TP pairs on devices 0,1 and 2,3.
  EXPECT_THAT(p->nodes, ElementsAre("a", "b"));
  EXPECT_THAT(NodesOfRanks(*p), ElementsAre("a", "a", "b", "b", "a", "a", "b", "b"));
  EXPECT_THAT(DevicesOfRanks(*p), ElementsAre(0, 1, 0, 1, 2, 3, 2, 3));
  EXPECT_THAT(LocalRanks(*p), ElementsAre(0, 1, 0, 1, 2, 3, 2, 3));
  struct Coordinates {
    int tp, pp, dp;
  };
  const std::vector<Coordinates> want = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0},
                                         {0, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}};
  for (int rank = 0; rank < 8; ++rank) {
    const v1::RankAssignment& a = p->assignments[rank];
    EXPECT_EQ(a.tp_rank(), want[rank].tp) << "rank " << rank;
    EXPECT_EQ(a.pp_rank(), want[rank].pp) << "rank " << rank;
    EXPECT_EQ(a.dp_rank(), want[rank].dp) << "rank " << rank;
  }
  // Pipeline stages of each replica are on different nodes.
  for (const v1::RankGroup& g : p->groups.pipeline()) {
    EXPECT_NE(p->assignments[g.ranks(0)].node(), p->assignments[g.ranks(1)].node()) << g.name();
  }

  const v1::ParallelismGroups& groups = p->groups;
  EXPECT_THAT(Names(groups.tensor()), ElementsAre("tp0", "tp1", "tp2", "tp3"));
  EXPECT_THAT(Ranks(groups.tensor(0)), ElementsAre(0, 1));  // dp0 pp0
  EXPECT_THAT(Ranks(groups.tensor(1)), ElementsAre(2, 3));  // dp0 pp1
  EXPECT_THAT(Ranks(groups.tensor(2)), ElementsAre(4, 5));  // dp1 pp0
  EXPECT_THAT(Ranks(groups.tensor(3)), ElementsAre(6, 7));  // dp1 pp1
  EXPECT_THAT(Names(groups.pipeline()), ElementsAre("pp0", "pp1", "pp2", "pp3"));
  EXPECT_THAT(Ranks(groups.pipeline(0)), ElementsAre(0, 2));  // dp0 tp0
  EXPECT_THAT(Ranks(groups.pipeline(1)), ElementsAre(1, 3));  // dp0 tp1
  EXPECT_THAT(Ranks(groups.pipeline(2)), ElementsAre(4, 6));  // dp1 tp0
  EXPECT_THAT(Ranks(groups.pipeline(3)), ElementsAre(5, 7));  // dp1 tp1
  EXPECT_THAT(Names(groups.data()), ElementsAre("dp0", "dp1", "dp2", "dp3"));
  EXPECT_THAT(Ranks(groups.data(0)), ElementsAre(0, 4));  // pp0 tp0
  EXPECT_THAT(Ranks(groups.data(1)), ElementsAre(1, 5));  // pp0 tp1
  EXPECT_THAT(Ranks(groups.data(2)), ElementsAre(2, 6));  // pp1 tp0
  EXPECT_THAT(Ranks(groups.data(3)), ElementsAre(3, 7));  // pp1 tp1
}

TEST(PlaceTest, TensorEightFillsEightDeviceNodes) {
  std::vector<NodeCapacity> nodes = {Node("gpu1", 8), Node("gpu0", 8)};
  const Layout layout = MakeLayout(2, 8, /*tensor=*/8, /*pipeline=*/2, /*data=*/1);
  absl::StatusOr<Placement> p = Place(nodes, layout, {});
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectValid(*p, layout, nodes);
  // Stage 0 (ranks 0-7) on gpu0, stage 1 (ranks 8-15) on gpu1, devices in order.
  for (int rank = 0; rank < 16; ++rank) {
    EXPECT_EQ(p->assignments[rank].node(), rank < 8 ? "gpu0" : "gpu1") << rank;
    EXPECT_EQ(p->assignments[rank].local_device(), rank % 8) << rank;
    EXPECT_EQ(p->assignments[rank].local_rank(), rank % 8) << rank;
  }
  EXPECT_THAT(Ranks(p->groups.tensor(1)), ElementsAre(8, 9, 10, 11, 12, 13, 14, 15));
  EXPECT_THAT(Ranks(p->groups.pipeline(3)), ElementsAre(3, 11));
}

TEST(PlaceTest, LocalRankFollowsGlobalRankNotDevice) {
  // TP=1, PP=2, DP=2 on one node: stage-major laying puts rank 0 (pp0 dp0) on device 0,
  // rank 2 (pp0 dp1) on device 1, rank 1 (pp1 dp0) on device 2, rank 3 (pp1 dp1) on device 3;
  // local_rank is still 0,1,2,3 in global-rank order.
  std::vector<NodeCapacity> nodes = {Node("solo", 4)};
  const Layout layout = MakeLayout(1, 4, 1, 2, 2);
  absl::StatusOr<Placement> p = Place(nodes, layout, {});
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectValid(*p, layout, nodes);
  EXPECT_THAT(DevicesOfRanks(*p), ElementsAre(0, 2, 1, 3));
  EXPECT_THAT(LocalRanks(*p), ElementsAre(0, 1, 2, 3));
}

struct NodeChoiceCase {
  std::string name;
  std::vector<NodeCapacity> nodes;
  Layout layout;
  std::set<std::string> excluded;
  std::vector<std::string> want_nodes;  // Placement::nodes.
  std::vector<int> want_devices;        // local_device by rank; empty: not checked.
};

void PrintTo(const NodeChoiceCase& c, std::ostream* os) { *os << c.name; }

class NodeChoiceTest : public ::testing::TestWithParam<NodeChoiceCase> {};

TEST_P(NodeChoiceTest, PicksExpectedNodes) {
  const NodeChoiceCase& c = GetParam();
  absl::StatusOr<Placement> p = Place(c.nodes, c.layout, c.excluded);
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectValid(*p, c.layout, c.nodes);
  EXPECT_EQ(p->nodes, c.want_nodes);
  if (!c.want_devices.empty()) {
    EXPECT_EQ(DevicesOfRanks(*p), c.want_devices);
  }
}

std::vector<NodeChoiceCase> NodeChoiceCases() {
  const std::vector<NodeCapacity> uneven = {Node("big", 8), Node("mid", 4), Node("small", 2),
                                            Node("also-mid", 4), Node("tiny", 1)};
  // 8 free devices: 0-3 in domain 0, 4-7 in domain 1.
  const NodeCapacity split = Node("split", 8, 2);
  // Domains of 3: {0,1,2} in domain 0, {3,4,5} in domain 1, listed out of order.
  const NodeCapacity threes{"threes", {{5, 1}, {0, 0}, {4, 1}, {2, 0}, {1, 0}, {3, 1}}};
  return {
      // Best fit: the smallest nodes that are big enough, ties broken by name.
      {"BestFitTieByName", uneven, MakeLayout(2, 4, 1, 1, 8), {}, {"also-mid", "mid"}, {}},
      {"BestFitSmallest", uneven, MakeLayout(1, 2, 2, 1, 1), {}, {"small"}, {0, 1}},
      {"BestFitOne", uneven, MakeLayout(1, 1, 1, 1, 1), {}, {"tiny"}, {0}},
      {"OnlyBigFits", uneven, MakeLayout(1, 5, 1, 1, 5), {}, {"big"}, {0, 1, 2, 3, 4}},
      {"SpillsToBig", uneven, MakeLayout(3, 4, 1, 1, 12), {}, {"also-mid", "mid", "big"}, {}},
      // Excluded nodes are skipped; unknown excluded names are harmless.
      {"Excluded", uneven, MakeLayout(2, 4, 1, 1, 8), {"also-mid", "ghost"}, {"mid", "big"}, {}},
      // A TP=4 group per domain of the split node.
      {"SplitDomainsHostTp4",
       {split},
       MakeLayout(1, 8, 4, 1, 2),
       {},
       {"split"},
       {0, 1, 2, 3, 4, 5, 6, 7}},
      // Whole domains: TP=2 groups take {0,1} and {3,4}; 2 and 5 are left over.
      {"LeftoverDevicesOfADomainAreSkipped",
       {threes},
       MakeLayout(1, 4, 2, 1, 2),
       {},
       {"threes"},
       {0, 1, 3, 4}},
      // The split node cannot host TP=8, so the 8-device node in one domain is used.
      {"Tp8AvoidsSplitNode",
       {split, Node("whole", 8)},
       MakeLayout(1, 8, 8, 1, 1),
       {},
       {"whole"},
       {0, 1, 2, 3, 4, 5, 6, 7}},
  };
}

INSTANTIATE_TEST_SUITE_P(Cases, NodeChoiceTest, ::testing::ValuesIn(NodeChoiceCases()),
                         [](const ::testing::TestParamInfo<NodeChoiceCase>& info) {
                           return info.param.name;
                         });

struct ErrorCase {
  std::string name;
  std::vector<NodeCapacity> nodes;
  Layout layout;
  std::set<std::string> excluded;
  absl::StatusCode code;
  std::string message;
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

class PlaceErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(PlaceErrorTest, Fails) {
  const ErrorCase& c = GetParam();
  absl::StatusOr<Placement> p = Place(c.nodes, c.layout, c.excluded);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), c.code);
  EXPECT_EQ(p.status().message(), c.message);
}

std::vector<ErrorCase> ErrorCases() {
  const auto kExhausted = absl::StatusCode::kResourceExhausted;
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  const std::vector<NodeCapacity> four_nodes = {Node("n0", 8), Node("n1", 8), Node("n2", 8),
                                                Node("n3", 8)};
  return {
      {"OneNodeExcludedOfFour",
       four_nodes,
       MakeLayout(4, 8, 8, 1, 4),
       {"n2"},
       kExhausted,
       "needs 4 nodes with 8 free devices in whole interconnect domains of 8 (TP=8); 3 usable "
       "(1 excluded)"},
      {"SplitDomainsCannotHostTp8",
       {Node("split", 8, 2)},
       MakeLayout(1, 8, 8, 1, 1),
       {},
       kExhausted,
       "needs 1 node with 8 free devices in whole interconnect domains of 8 (TP=8); 0 usable"},
      {"TooFewFreeDevices",
       {Node("a", 4), Node("b", 3)},
       MakeLayout(2, 4, 1, 1, 8),
       {},
       kExhausted,
       "needs 2 nodes with 4 free devices; 1 usable"},
      {"NoNodes",
       {},
       MakeLayout(1, 1, 1, 1, 1),
       {},
       kExhausted,
       "needs 1 node with 1 free device; 0 usable"},
      {"ProductMismatch",
       four_nodes,
       MakeLayout(1, 8, 2, 2, 1),
       {},
       kInvalid,
       "parallelism: tensor*pipeline*data (4) must equal nodes*devices_per_node (8)"},
      {"TensorDoesNotDivideDevicesPerNode",
       four_nodes,
       MakeLayout(2, 6, 4, 3, 1),
       {},
       kInvalid,
       "parallelism.tensor: must divide devices_per_node (6), got 4"},
      {"ZeroData",
       four_nodes,
       MakeLayout(1, 8, 8, 1, 0),
       {},
       kInvalid,
       "parallelism.data: must be >= 1, got 0"},
      {"ZeroPipeline",
       four_nodes,
       MakeLayout(1, 8, 8, 0, 1),
       {},
       kInvalid,
       "parallelism.pipeline: must be >= 1, got 0"},
      {"NegativeTensor",
       four_nodes,
       MakeLayout(1, 8, -8, -1, 1),
       {},
       kInvalid,
       "parallelism.tensor: must be >= 1, got -8"},
      {"ZeroNodes",
       four_nodes,
       MakeLayout(0, 8, 8, 1, 1),
       {},
       kInvalid,
       "nodes: must be >= 1, got 0"},
      {"ZeroDevicesPerNode",
       four_nodes,
       MakeLayout(1, 0, 1, 1, 1),
       {},
       kInvalid,
       "devices_per_node: must be >= 1, got 0"},
  };
}

INSTANTIATE_TEST_SUITE_P(Cases, PlaceErrorTest, ::testing::ValuesIn(ErrorCases()),
                         [](const ::testing::TestParamInfo<ErrorCase>& info) {
                           return info.param.name;
                         });

TEST(PlaceTest, ResultDoesNotDependOnInputOrder) {
  std::vector<NodeCapacity> nodes;
  for (int i = 0; i < 12; ++i) nodes.push_back(Node("n" + std::to_string(i), 4 + i % 3 * 2, 2));
  const Layout layout = MakeLayout(6, 4, 2, 3, 4);
  absl::StatusOr<Placement> first = Place(nodes, layout, {"n4"});
  ASSERT_TRUE(first.ok()) << first.status();
  ExpectValid(*first, layout, nodes);
  // Nodes with 4 free devices (i % 3 == 0) first, by name, then those with 6: n0 n3 n6 n9 n1 n10.
  EXPECT_THAT(first->nodes, ElementsAre("n0", "n3", "n6", "n9", "n1", "n10"));

  std::mt19937 rng(7);  // Fixed seed: the test is deterministic.
  for (int trial = 0; trial < 5; ++trial) {
    std::shuffle(nodes.begin(), nodes.end(), rng);
    for (NodeCapacity& n : nodes) std::shuffle(n.free.begin(), n.free.end(), rng);
    absl::StatusOr<Placement> again = Place(nodes, layout, {"n4"});
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->nodes, first->nodes);
    ASSERT_EQ(again->assignments.size(), first->assignments.size());
    for (size_t i = 0; i < first->assignments.size(); ++i) {
      EXPECT_EQ(again->assignments[i].SerializeAsString(),
                first->assignments[i].SerializeAsString())
          << "rank " << i;
    }
    EXPECT_EQ(again->groups.SerializeAsString(), first->groups.SerializeAsString());
  }
}

// Place's nodes as the full computation chooses them (the reference for its fast path, which
// sorts devices only for the best-fit nodes): every node's free devices counted in whole TP
// groups per domain, the nodes with enough of them, the fewest free devices first, then by name.
// Empty when too few nodes fit.
std::vector<std::string> ReferenceNodes(const std::vector<NodeCapacity>& nodes,
                                        const Layout& layout,
                                        const std::set<std::string>& excluded) {
  std::vector<std::pair<size_t, std::string>> fitting;  // (free devices, name)
  for (const NodeCapacity& node : nodes) {
    if (excluded.count(node.name) > 0) continue;
    std::map<int, int> per_domain;
    for (const FreeDevice& d : node.free) ++per_domain[d.domain];
    int in_whole_groups = 0;
    for (const auto& [domain, count] : per_domain) {
      in_whole_groups += count / layout.tensor * layout.tensor;
    }
    if (in_whole_groups >= layout.devices_per_node)
      fitting.emplace_back(node.free.size(), node.name);
  }
  if (static_cast<int>(fitting.size()) < layout.nodes) return {};
  std::sort(fitting.begin(), fitting.end());
  std::vector<std::string> names;
  for (int n = 0; n < layout.nodes; ++n) names.push_back(fitting[n].second);
  return names;
}

// Random clusters with devices split over domains, some busy: Place picks the reference's
// nodes, or fails when the reference finds too few.
TEST(PlaceTest, MatchesTheFullComputationOnRandomClusters) {
  std::mt19937 rng(13);  // Fixed seed: the test is deterministic.
  auto uniform = [&](int low, int high) {
    return std::uniform_int_distribution<int>(low, high)(rng);
  };
  int placed = 0, refused = 0, fallback = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<NodeCapacity> nodes;
    std::set<std::string> excluded;
    const int node_count = uniform(1, 10);
    for (int n = 0; n < node_count; ++n) {
      NodeCapacity node{"n" + std::to_string(n), {}};
      const int domains = uniform(1, 3);
      for (int i = 0; i < 8; ++i) {
        if (uniform(0, 3) > 0) node.free.push_back({i, uniform(0, domains - 1)});
      }
      if (node.free.empty()) continue;
      if (uniform(0, 9) == 0) excluded.insert(node.name);
      nodes.push_back(std::move(node));
    }
    const int tensor = 1 << uniform(0, 2);
    const int devices_per_node = tensor * uniform(1, 8 / tensor);
    const int layout_nodes = uniform(1, 3);
    const Layout layout = MakeLayout(layout_nodes, devices_per_node, tensor, 1,
                                     layout_nodes * devices_per_node / tensor);
    const std::vector<std::string> want = ReferenceNodes(nodes, layout, excluded);
    absl::StatusOr<Placement> got = Place(nodes, layout, excluded);
    if (want.empty()) {
      EXPECT_TRUE(absl::IsResourceExhausted(got.status()))
          << "trial " << trial << ": " << got.status();
      ++refused;
      continue;
    }
    ASSERT_TRUE(got.ok()) << "trial " << trial << ": " << got.status();
    EXPECT_EQ(got->nodes, want) << "trial " << trial;
    ExpectValid(*got, layout, nodes);
    ++placed;
    // Did a node the free counts alone rank higher lack whole groups (Place's slow path)?
    std::vector<std::pair<size_t, std::string>> by_count;
    for (const NodeCapacity& node : nodes) {
      if (excluded.count(node.name) == 0 &&
          static_cast<int>(node.free.size()) >= devices_per_node) {
        by_count.emplace_back(node.free.size(), node.name);
      }
    }
    std::sort(by_count.begin(), by_count.end());
    for (int n = 0; n < layout_nodes; ++n) {
      if (by_count[n].second != want[n]) {
        ++fallback;
        break;
      }
    }
  }
  // Each way through Place was taken many times.
  EXPECT_GT(placed, 300);
  EXPECT_GT(refused, 300);
  EXPECT_GT(fallback, 30);
}

TEST(PlaceTest, LargeClusterInvariants) {
  // 4096 nodes of 8 devices, plus 4 nodes of 16 that best fit must leave free.
  std::vector<NodeCapacity> nodes;
  for (int i = 0; i < 4; ++i) nodes.push_back(Node("fat" + std::to_string(i), 16));
  for (int i = 0; i < 4096; ++i) nodes.push_back(Node("node" + std::to_string(i), 8));
  const Layout layout = MakeLayout(4096, 8, /*tensor=*/8, /*pipeline=*/4, /*data=*/1024);
  absl::StatusOr<Placement> p = Place(nodes, layout, {});
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectValid(*p, layout, nodes);
  for (const std::string& n : p->nodes) EXPECT_EQ(n.rfind("fat", 0), std::string::npos) << n;

  // One TP group per node, laid stage-major: node k holds stage k / 1024 of replica k % 1024.
  for (int k = 0; k < 4096; ++k) {
    const int rank = ((k % 1024) * 4 + k / 1024) * 8;
    ASSERT_EQ(p->assignments[rank].node(), p->nodes[k]) << "group " << k;
  }
  // Every pipeline spans four different nodes.
  for (const v1::RankGroup& g : p->groups.pipeline()) {
    std::set<std::string> stage_nodes;
    for (int r : g.ranks()) stage_nodes.insert(p->assignments[r].node());
    ASSERT_EQ(stage_nodes.size(), 4u) << g.name();
  }
  EXPECT_EQ(p->groups.tensor_size(), 4096);
  EXPECT_EQ(p->groups.pipeline_size(), 8192);
  ASSERT_EQ(p->groups.data_size(), 32);
  EXPECT_EQ(p->groups.data(31).name(), "dp31");
  EXPECT_EQ(p->groups.data(31).ranks_size(), 1024);
  // dp31 is pp3 tp7: ranks (dp*4 + 3)*8 + 7 = 32*dp + 31.
  EXPECT_EQ(p->groups.data(31).ranks(1023), 32 * 1023 + 31);
}

// A job that does not fit now is placed over every device, on the nodes with the most free now
// (n3, then n1 before n2 by name), and on n3 on its free devices, not its busy ones.
TEST(PlaceTest, PlaceOnceFreeTakesTheDevicesNearestToBeingFree) {
  const std::vector<NodeCapacity> usable = {Node("n1", 2), Node("n2", 2), Node("n3", 4)};
  NodeCapacity n3_free{"n3", {{2, 0}, {3, 0}}};
  const std::vector<NodeCapacity> free = {n3_free};
  const Layout layout = MakeLayout(2, 2, 1, 1, 4);
  ASSERT_FALSE(Place(free, layout, {}).ok());
  auto held = PlaceOnceFree(usable, free, layout, {});
  ASSERT_TRUE(held.ok()) << held.status();
  ExpectValid(*held, layout, usable);
  std::set<std::pair<std::string, int>> devices;
  for (const v1::RankAssignment& a : held->assignments) devices.emplace(a.node(), a.local_device());
  EXPECT_EQ(devices,
            (std::set<std::pair<std::string, int>>{{"n1", 0}, {"n1", 1}, {"n3", 2}, {"n3", 3}}));
  EXPECT_EQ(PlaceOnceFree(usable, free, MakeLayout(2, 4, 1, 1, 8), {}).status().code(),
            absl::StatusCode::kResourceExhausted)
      << "only one node has 4 devices";
}

// On a node of two interconnect domains, {0,1} busy and {2,3} with 2 and 3 free, the held
// devices are the free domain's, for one-device groups and for TP=2 groups alike (a group stays
// inside one domain); an excluded node is left out while another can stand in.
TEST(PlaceTest, PlaceOnceFreePrefersTheDomainsFreeNow) {
  const std::vector<NodeCapacity> usable = {Node("n1", 4, 2), Node("n2", 4, 2), Node("n3", 4, 2)};
  const std::vector<NodeCapacity> free = {NodeCapacity{"n1", {{2, 1}, {3, 1}}}};
  for (const int tensor : {1, 2}) {
    const Layout layout = MakeLayout(2, 2, tensor, 1, 4 / tensor);
    auto held = PlaceOnceFree(usable, free, layout, {});
    ASSERT_TRUE(held.ok()) << held.status();
    ExpectValid(*held, layout, usable);
    std::set<std::pair<std::string, int>> devices;
    for (const auto& a : held->assignments) devices.emplace(a.node(), a.local_device());
    EXPECT_EQ(devices,
              (std::set<std::pair<std::string, int>>{{"n1", 2}, {"n1", 3}, {"n2", 0}, {"n2", 1}}))
        << "TP=" << tensor;
    auto elsewhere = PlaceOnceFree(usable, free, layout, {"n2"});
    ASSERT_TRUE(elsewhere.ok()) << elsewhere.status();
    for (const auto& a : elsewhere->assignments) EXPECT_NE(a.node(), "n2");
  }
}

// The devices a placement takes come off the capacity; a node left with none is dropped.
TEST(PlaceTest, WithoutDevicesOfRemovesWhatAPlacementTakes) {
  const std::vector<NodeCapacity> nodes = {Node("a", 2), Node("b", 4)};
  auto p = Place(nodes, MakeLayout(1, 2, 1, 1, 2), {});  // best fit: node a, both devices
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<NodeCapacity> left = WithoutDevicesOf(nodes, *p);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].name, "b");
  EXPECT_EQ(left[0].free.size(), 4u);
  auto half = Place(left, MakeLayout(1, 2, 1, 1, 2), {});
  ASSERT_TRUE(half.ok()) << half.status();
  left = WithoutDevicesOf(left, *half);
  ASSERT_EQ(left.size(), 1u);
  ASSERT_EQ(left[0].free.size(), 2u);
  EXPECT_EQ(left[0].free[0].index, 2);
  EXPECT_EQ(left[0].free[1].index, 3);
}

// Only the placement's nodes are visited, found by name: here the middle one of three.
TEST(PlaceTest, TakeDevicesFindsThePlacementsNodesByName) {
  std::vector<NodeCapacity> nodes = {Node("a", 4), Node("b", 2), Node("c", 4)};
  auto p = Place(nodes, MakeLayout(1, 2, 1, 1, 2), {});  // best fit: node b
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->nodes, std::vector<std::string>{"b"});
  TakeDevices(*p, &nodes);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].name, "a");
  EXPECT_EQ(nodes[1].name, "c");
  auto two = Place(nodes, MakeLayout(2, 3, 1, 1, 6), {});
  ASSERT_TRUE(two.ok()) << two.status();
  TakeDevices(*two, &nodes);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].free.size(), 1u);
  EXPECT_EQ(nodes[1].free.size(), 1u);
}

TEST(MakeGroupsTest, PipelineOnly) {
  const v1::ParallelismGroups groups = MakeGroups(MakeLayout(4, 1, 1, 4, 1));
  ASSERT_EQ(groups.pipeline_size(), 1);
  EXPECT_EQ(groups.pipeline(0).name(), "pp0");
  EXPECT_THAT(Ranks(groups.pipeline(0)), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(Names(groups.tensor()), ElementsAre("tp0", "tp1", "tp2", "tp3"));
  EXPECT_THAT(Names(groups.data()), ElementsAre("dp0", "dp1", "dp2", "dp3"));
  EXPECT_THAT(Ranks(groups.data(2)), ElementsAreArray({2}));
}

}  // namespace
}  // namespace ringmaster::coordinator
