#include "coordinator/hang_analysis.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::ElementsAre;

TEST(HangAnalysisTest, NamesTheRankThatDidNotEnterTheCollectiveOthersWaitIn) {
  // dp0: ranks 0, 1, 3 entered #57 and wait; rank 2 is still at #56 (stopped while computing).
  std::map<int, RankCollectives> ranks = {
      {0, {{"dp0", {57, 56}}, {"world", {3, 3}}}},
      {1, {{"dp0", {57, 56}}, {"world", {3, 3}}}},
      {2, {{"dp0", {56, 56}}, {"world", {3, 3}}}},
      {3, {{"dp0", {57, 56}}, {"world", {3, 3}}}},
  };
  std::vector<Laggard> l = FindLaggards(ranks);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].rank, 2);
  EXPECT_EQ(l[0].group, "dp0");
  EXPECT_EQ(l[0].entered, 56);
  EXPECT_EQ(l[0].waited_in, 57);
  EXPECT_THAT(l[0].waiting, ElementsAre(0, 1, 3));
  EXPECT_EQ(DescribeLaggards(l),
            "rank 2 has not entered collective #57 of dp0 (it is at #56) that ranks 0, 1, 3 wait in");
}

TEST(HangAnalysisTest, TableOfOtherShapes) {
  struct Case {
    std::string name;
    std::map<int, RankCollectives> ranks;
    std::vector<int> laggards;
  };
  const std::vector<Case> cases = {
      {"nobody inside a collective", {{0, {{"dp0", {5, 5}}}}, {1, {{"dp0", {5, 5}}}}}, {}},
      {"all inside the same one", {{0, {{"dp0", {6, 5}}}}, {1, {{"dp0", {6, 5}}}}}, {}},
      // The others finished #6; rank 1 is behind but nobody waits for it in #6 any more.
      {"behind without waiters", {{0, {{"dp0", {6, 6}}}}, {1, {{"dp0", {5, 5}}}}}, {}},
      {"two laggards in two groups",
       {{0, {{"tp0", {9, 8}}}}, {1, {{"tp0", {8, 8}}}}, {2, {{"tp1", {4, 4}}}},
        {3, {{"tp1", {5, 4}}}}},
       {1, 2}},
      {"nothing reported", {}, {}},
      // A ring let rank 0 finish #176 and enter #177; ranks 1 and 3 still wait inside #176;
      // rank 2 sits outside any collective at #172: only rank 2 is to blame.
      {"spread over two collectives",
       {{0, {{"dp0", {177, 176}}}}, {1, {{"dp0", {176, 175}}}}, {2, {{"dp0", {172, 172}}}},
        {3, {{"dp0", {176, 175}}}}},
       {2}},
  };
  for (const Case& c : cases) {
    std::vector<int> got;
    for (const Laggard& l : FindLaggards(c.ranks)) got.push_back(l.rank);
    EXPECT_EQ(got, c.laggards) << c.name;
  }
}

TEST(HangAnalysisTest, NamesTheRankThatNeverReachedInitProcessGroup) {
  // Ranks 0 and 2 wait in init_process_group's rendezvous; rank 1 reported nothing (stuck before
  // calling it), rank 3 only an empty map: both are the ones waited for. Without the world size
  // nobody is named (a rank with no numbers is in no group).
  const std::map<int, RankCollectives> ranks = {
      {0, {{kRendezvousGroup, {1, 0}}}}, {2, {{kRendezvousGroup, {1, 0}}}}, {3, {}}};
  EXPECT_TRUE(FindLaggards(ranks).empty());
  std::vector<Laggard> l = FindLaggards(ranks, 4);
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0].rank, 1);
  EXPECT_EQ(l[1].rank, 3);
  EXPECT_THAT(l[0].waiting, ElementsAre(0, 2));
  EXPECT_EQ(DescribeLaggards({l[0]}),
            "rank 1 has not reached init_process_group's rendezvous that ranks 0, 2 wait in");

  // Everyone through it (rank 1 with no numbers at all, as a rank that never reported): no one
  // waits in it, so no one is named.
  EXPECT_TRUE(FindLaggards({{0, {{kRendezvousGroup, {1, 1}}, {"world", {9, 9}}}}, {1, {}}}, 2)
                  .empty());
  // Ranks 1 and 3's nodes have not registered again with a coordinator that restarted: not
  // named; only rank 3 still awaited: rank 1 is.
  EXPECT_TRUE(FindLaggards(ranks, 4, {1, 3}).empty());
  l = FindLaggards(ranks, 4, {3});
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].rank, 1);
  // No rank reports the rendezvous (the builtin trainer, a watch before it): the rule is off.
  EXPECT_TRUE(FindLaggards({{0, {{"world", {2, 1}}}}}, 2).empty());
  // A rank with numbers but none of the rendezvous (past it, its watch before it) is not named
  // by this rule.
  EXPECT_TRUE(FindLaggards({{0, {{kRendezvousGroup, {1, 0}}}}, {1, {{"world", {0, 0}}}}}, 2)
                  .empty());
}

// The checkpoint rule: ranks writing a checkpoint are not blamed; a report whose evidence names
// only them is a wait, not a hang; one that also names a rank stuck elsewhere blames that rank.
TEST(HangAnalysisTest, RanksWritingACheckpointAreNotBlamed) {
  struct Case {
    std::string name;
    std::vector<int> suspects;
    std::set<int> checkpointing;
    std::vector<int> blamed;
    std::vector<int> waits;
  };
  const std::vector<Case> cases = {
      {"nobody checkpoints", {2}, {}, {2}, {}},
      {"the only suspect checkpoints", {0}, {0}, {}, {0}},
      {"a stuck rank beside a checkpointing one", {0, 2}, {0}, {2}, {0}},
      {"someone else checkpoints", {2}, {0}, {2}, {}},
      {"no evidence at all", {}, {0}, {}, {}},
      {"one rank named twice", {0, 0}, {0}, {}, {0}},
  };
  for (const Case& c : cases) {
    std::vector<Suspect> suspects;
    for (int r : c.suspects) suspects.push_back({r, "why"});
    std::vector<int> waits;
    std::vector<int> blamed;
    for (const Suspect& s : OutsideCheckpoints(suspects, c.checkpointing, &waits)) {
      blamed.push_back(s.rank);
    }
    EXPECT_EQ(blamed, c.blamed) << c.name;
    EXPECT_EQ(waits, c.waits) << c.name;
  }
}

// What each rank is doing, as `ringctl top` shows it: rank 1 waits in world #35, rank 0 (working)
// and rank 2 (not) have not entered it; rank 3 waits in init_process_group for rank 4.
TEST(RankActivityTest, SaysWhoWaitsAndWhoHoldsThemUp) {
  std::map<int, RankCollectives> ranks = {
      {0, {{"world", {34, 34}}}},
      {1, {{"world", {35, 34}}}},
      {2, {{"world", {34, 34}}, {"pg1", {3, 3}}}},
  };
  const std::vector<Laggard> laggards = FindLaggards(ranks);
  ASSERT_EQ(laggards.size(), 2u);
  auto view = [&](int rank) {
    RankView v;
    v.numbers = &ranks[rank];
    v.phase = v1::WORKER_PHASE_STEP;
    v.settled = true;
    for (const Laggard& l : laggards) {
      if (l.rank == rank) v.behind = &l;
    }
    return v;
  };
  RankView v = view(0);
  v.working = true;
  EXPECT_EQ(RankActivity(v), "behind world #35 (at #34), working");
  EXPECT_EQ(RankActivity(view(1)), "in world #35");
  EXPECT_EQ(RankActivity(view(2)), "behind world #35 (at #34)");
  v.phase = v1::WORKER_PHASE_CHECKPOINT;
  EXPECT_EQ(RankActivity(v), "checkpoint");
  v.phase = v1::WORKER_PHASE_EVAL;
  EXPECT_EQ(RankActivity(v), "eval");
  v = view(0);
  v.unwatched = true;
  EXPECT_EQ(RankActivity(v), "unwatched");
  v.finished = true;
  EXPECT_EQ(RankActivity(v), "exited");

  // Numbers just sampled, not held: an async all-reduce in flight is no wait, a rank between
  // steps is stepping.
  v = view(1);
  v.settled = false;
  EXPECT_EQ(RankActivity(v), "stepping");
  v.phase = v1::WORKER_PHASE_STARTING;  // before its first step: its phase says more
  EXPECT_EQ(RankActivity(v), "starting");
  // Waiting inside one group is said first, though the rank is behind in another.
  ranks[1][std::string("dp0")] = {4, 4};
  Laggard dp0{1, "dp0", 4, 5, {3}};
  v = view(1);
  v.behind = &dp0;
  EXPECT_EQ(RankActivity(v), "in world #35");

  // Nobody waits: outside collectives, working or not.
  RankView outside;
  RankCollectives done = {{"world", {35, 35}}};
  outside.numbers = &done;
  outside.settled = true;
  outside.working = true;
  EXPECT_EQ(RankActivity(outside), "outside collectives, working");
  outside.working = false;
  EXPECT_EQ(RankActivity(outside), "outside collectives");

  // Nothing reported: its phase, or "-".
  RankView none;
  EXPECT_EQ(RankActivity(none), "-");
  none.phase = v1::WORKER_PHASE_INIT;
  EXPECT_EQ(RankActivity(none), "init");
  none.phase = v1::WORKER_PHASE_STARTING;
  EXPECT_EQ(RankActivity(none), "starting");

  // init_process_group: rank 3 waits in its rendezvous, rank 4 has reported nothing.
  std::map<int, RankCollectives> init = {{3, {{"rendezvous", {1, 0}}}}};
  const std::vector<Laggard> behind = FindLaggards(init, /*world=*/5, {0, 1, 2});
  ASSERT_EQ(behind.size(), 1u);
  RankView waiter;
  waiter.numbers = &init[3];
  waiter.settled = true;
  EXPECT_EQ(RankActivity(waiter), "in init_process_group");
  none.behind = &behind[0];
  EXPECT_EQ(RankActivity(none), "not at init_process_group");
}

}  // namespace
}  // namespace ringmaster::coordinator
