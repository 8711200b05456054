// The trainer joins exactly the groups the coordinator assigns (same names, same members, rank in
// group = position among the members), for many layouts; the pipeline's tied-embedding groups
// pair each first stage with its own last stage. AnyRankAsks tells every rank of a 3-D layout
// of any rank's request, over real loopback groups.
#include "trainer/parallel/parallel_groups.h"

#include <map>
#include <tuple>

#include "common/status.h"
#include "coordinator/placement.h"
#include "gtest/gtest.h"
#include "trainer/comm/key_value_store.h"
#include "trainer/comm/testing.h"

namespace ringmaster::trainer {
namespace {

class ParallelGroupsTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(ParallelGroupsTest, MatchTheCoordinatorsGroups) {
  const auto [tp, pp, dp] = GetParam();
  coordinator::Layout layout;
  layout.tensor = tp;
  layout.pipeline = pp;
  layout.data = dp;
  const v1::ParallelismGroups groups = coordinator::MakeGroups(layout);
  std::map<std::string, std::vector<int>> expected;
  for (const auto* list : {&groups.tensor(), &groups.pipeline(), &groups.data()}) {
    for (const v1::RankGroup& g : *list) {
      expected[g.name()] = std::vector<int>(g.ranks().begin(), g.ranks().end());
    }
  }
  std::map<std::string, int> emb_members;
  for (int rank = 0; rank < tp * pp * dp; ++rank) {
    const RankPlace place = RankPlace::Of(rank, tp, pp, dp);
    EXPECT_EQ((place.dp_rank * pp + place.pp_rank) * tp + place.tp_rank, rank);
    const std::vector<GroupMembership> mine = GroupsOf(place);
    ASSERT_EQ(mine.size(), pp > 1 && (place.first_stage() || place.last_stage()) ? 4u : 3u);
    for (const GroupMembership& g : mine) {
      EXPECT_EQ(static_cast<int>(g.members.size()), g.size) << g.name;
      EXPECT_EQ(g.members[g.rank], rank) << g.name;
      if (g.name.rfind("emb", 0) == 0) {
        ++emb_members[g.name];
        EXPECT_EQ(g.members[0], RankPlace::Of(g.members[0], tp, pp, dp).rank);
        EXPECT_TRUE(RankPlace::Of(g.members[0], tp, pp, dp).first_stage());
        EXPECT_TRUE(RankPlace::Of(g.members[1], tp, pp, dp).last_stage());
        EXPECT_EQ(RankPlace::Of(g.members[0], tp, pp, dp).tp_rank, place.tp_rank);
        EXPECT_EQ(RankPlace::Of(g.members[1], tp, pp, dp).dp_rank, place.dp_rank);
        continue;
      }
      ASSERT_TRUE(expected.count(g.name)) << g.name << " is not a coordinator group";
      EXPECT_EQ(g.members, expected[g.name]) << g.name;
    }
  }
  for (const auto& [name, count] : emb_members) EXPECT_EQ(count, 2) << name;
  EXPECT_EQ(static_cast<int>(emb_members.size()), pp > 1 ? tp * dp : 0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ParallelGroupsTest,
                         ::testing::Values(std::make_tuple(1, 1, 1), std::make_tuple(2, 1, 1),
                                           std::make_tuple(1, 2, 1), std::make_tuple(2, 2, 2),
                                           std::make_tuple(4, 3, 2), std::make_tuple(1, 4, 3),
                                           std::make_tuple(2, 1, 4)));

TEST(AnyRankAsksTest, EveryRankLearnsOfARequestFromAnyPositionOfTheGrid) {
  const int tp = 2, pp = 2, dp = 2, world = tp * pp * dp;
  InMemoryStore store;
  std::vector<ParallelGroups> groups(world);
  for (const absl::Status& s : testing::RunRanks(world, [&](int rank) -> absl::Status {
         ASSIGN_OR_RETURN(groups[rank], ConnectParallelGroups(
                                            RankPlace::Of(rank, tp, pp, dp),
                                            [&](const std::string& name, int r, int n) {
                                              return testing::ConnectLoopback(name, r, n, &store);
                                            }));
         return absl::OkStatus();
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  // No asker, then one at each corner of the grid and one in the middle; a stop from there, a
  // link check from the rank opposite and a failed checkpoint writer from the next one, so the
  // three requests travel independently.
  for (const int asker : {-1, 0, 3, 5, 7}) {
    const int checker = asker < 0 ? -1 : world - 1 - asker;
    const int failed = asker < 0 ? -1 : (asker + 1) % world;
    std::vector<RankRequests> answers(world);
    for (const absl::Status& s : testing::RunRanks(world, [&](int rank) -> absl::Status {
           ASSIGN_OR_RETURN(
               answers[rank],
               AnyRankAsks(groups[rank], {rank == asker, rank == checker, rank == failed}));
           return absl::OkStatus();
         })) {
      ASSERT_TRUE(s.ok()) << s;
    }
    const RankRequests want{asker >= 0, checker >= 0, failed >= 0};
    for (int rank = 0; rank < world; ++rank) {
      EXPECT_TRUE(answers[rank] == want) << "asker " << asker << " rank " << rank;
    }
  }
  std::vector<RankRequests> only_links(world);
  for (const absl::Status& s : testing::RunRanks(world, [&](int rank) -> absl::Status {
         ASSIGN_OR_RETURN(only_links[rank], AnyRankAsks(groups[rank], {false, rank == 6}));
         return absl::OkStatus();
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  for (const RankRequests& r : only_links) EXPECT_TRUE(r == (RankRequests{false, true, false}));
  // The votes are numbered on each group but add nothing to its totals.
  EXPECT_EQ(groups[0].dp->entered(), 6);
  EXPECT_TRUE(groups[0].dp->TakeTotals().empty());
}

}  // namespace
}  // namespace ringmaster::trainer
