#include "coordinator/generation_state.h"

#include <utility>

#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

TEST(GenerationStateTest, ALaunchedGenerationStartsFromNothingWithItsRanksAtZero) {
  const GenerationState state = GenerationState::Launched(4, 1.5);
  EXPECT_EQ(state.rank_step, std::vector<int64_t>(4, 0));
  EXPECT_EQ(state.rank_tokens_per_second, std::vector<double>(4, 0));
  EXPECT_NE(state.stragglers, nullptr);
  EXPECT_TRUE(state.finished_ranks.empty());
  EXPECT_TRUE(state.awaiting.empty());
  EXPECT_TRUE(state.last_heard.empty());
  EXPECT_EQ(state.heard_from, absl::InfinitePast());
  EXPECT_TRUE(state.pending_hangs.empty());
  EXPECT_TRUE(state.set_aside_hangs.empty());
  EXPECT_FALSE(state.resumed);
  EXPECT_EQ(state.checkpoint_at_launch, -1);
  EXPECT_EQ(state.furthest_step, 0);
  EXPECT_EQ(state.start_step, 0);
  EXPECT_EQ(state.failed_checkpoint_step, 0);
  EXPECT_EQ(state.link_check, nullptr);
}

TEST(GenerationStateTest, ARecoveredGenerationJudgesNoStragglers) {
  const GenerationState state = GenerationState::Recovered(2);
  EXPECT_EQ(state.rank_step.size(), 2u);
  EXPECT_EQ(state.stragglers, nullptr);
}

TEST(GenerationStateTest, ALaunchReplacesEverythingOfThePreviousGeneration) {
  GenerationState state = GenerationState::Launched(2, 1.2);
  state.finished_ranks.insert(1);
  state.rank_step = {7, 9};
  state.awaiting["a"].insert(0);
  state.last_heard[0] = absl::UnixEpoch();
  state.pending_hangs[1] =
      GenerationState::PendingHang{"a", {}, absl::UnixEpoch(), absl::UnixEpoch()};
  state.set_aside_hangs[0].step = 7;
  state.resumed = true;
  state.furthest_step = 9;
  state.steps_lost = "resumed from step 0";
  state.start_link_check_seconds[0] = 1.5;
  state = GenerationState::Launched(3, 1.2);
  EXPECT_TRUE(state.finished_ranks.empty());
  EXPECT_EQ(state.rank_step, std::vector<int64_t>(3, 0));
  EXPECT_TRUE(state.awaiting.empty());
  EXPECT_TRUE(state.last_heard.empty());
  EXPECT_TRUE(state.pending_hangs.empty());
  EXPECT_TRUE(state.set_aside_hangs.empty());
  EXPECT_FALSE(state.resumed);
  EXPECT_EQ(state.furthest_step, 0);
  EXPECT_TRUE(state.steps_lost.empty());
  EXPECT_TRUE(state.start_link_check_seconds.empty());
}

}  // namespace
}  // namespace ringmaster::coordinator
