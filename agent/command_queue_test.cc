// The order of an agent's launch and stop commands, as pure bookkeeping.
#include "agent/command_queue.h"

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A launch of (job, generation) with one rank per device, ranks counted from `first_rank`.
v1::CoordinatorMessage Launch(const std::string& job, int64_t generation,
                              std::initializer_list<int> devices, int first_rank = 0) {
  v1::CoordinatorMessage m;
  m.mutable_launch()->mutable_job()->set_job_id(job);
  m.mutable_launch()->mutable_job()->set_generation(generation);
  int rank = first_rank;
  for (int d : devices) {
    v1::RankAssignment* a = m.mutable_launch()->add_assignments();
    a->set_rank(rank++);
    a->set_local_device(d);
  }
  return m;
}

v1::CoordinatorMessage Stop(const std::string& job, int64_t generation) {
  v1::CoordinatorMessage m;
  m.mutable_stop()->mutable_job()->set_job_id(job);
  m.mutable_stop()->mutable_job()->set_generation(generation);
  return m;
}

// "launch A/1", "stop A/1", or "none".
std::string Describe(const std::optional<v1::CoordinatorMessage>& m) {
  if (!m.has_value()) return "none";
  if (m->has_launch()) {
    return absl::StrCat("launch ", m->launch().job().job_id(), "/", m->launch().job().generation());
  }
  return absl::StrCat("stop ", m->stop().job().job_id(), "/", m->stop().job().generation());
}

std::vector<std::string> Describe(const std::vector<StartingRank>& ranks) {
  std::vector<std::string> out;
  for (const StartingRank& r : ranks) {
    out.push_back(absl::StrCat(r.job_id, "/", r.generation, " rank ", r.rank));
  }
  return out;
}

v1::JobGeneration Job(const std::string& id, int64_t generation) {
  v1::JobGeneration job;
  job.set_job_id(id);
  job.set_generation(generation);
  return job;
}

TEST(CommandQueueTest, QueuesOnlyLaunchesAndStops) {
  CommandQueue queue;
  v1::CoordinatorMessage read_log;
  read_log.mutable_read_log()->set_request_id(1);
  EXPECT_FALSE(queue.Push(read_log));
  v1::CoordinatorMessage check_links;
  check_links.mutable_check_links()->set_rank(0);
  EXPECT_FALSE(queue.Push(check_links));
  EXPECT_FALSE(queue.HasReady());
  EXPECT_EQ(Describe(queue.TakeReady()), "none");
  EXPECT_TRUE(queue.Push(Launch("a", 1, {0})));
  EXPECT_TRUE(queue.Push(Stop("a", 1)));
  EXPECT_TRUE(queue.HasReady());
}

TEST(CommandQueueTest, AJobsCommandsRunInTheOrderReceived) {
  CommandQueue queue;
  queue.Push(Launch("a", 1, {0}));
  queue.Push(Stop("a", 1));
  queue.Push(Launch("a", 2, {0}));
  EXPECT_EQ(Describe(queue.TakeReady()), "launch a/1");
  queue.LaunchDone(Job("a", 1));
  EXPECT_EQ(Describe(queue.TakeReady()), "stop a/1");
  EXPECT_EQ(Describe(queue.TakeReady()), "launch a/2");
  EXPECT_EQ(Describe(queue.TakeReady()), "none");
}

TEST(CommandQueueTest, AJobsNextCommandWaitsForItsStopOtherJobsDoNot) {
  CommandQueue queue;
  queue.Push(Stop("a", 1));
  queue.Push(Launch("a", 2, {0}));
  queue.Push(Launch("b", 1, {5}));
  EXPECT_EQ(Describe(queue.TakeReady()), "stop a/1");
  queue.StopStarted("a", {0});
  EXPECT_EQ(Describe(queue.TakeReady()), "launch b/1");  // passes a/2, which waits for the stop
  EXPECT_FALSE(queue.HasReady());
  queue.StopEnded("a", {0});
  EXPECT_TRUE(queue.HasReady());
  EXPECT_EQ(Describe(queue.TakeReady()), "launch a/2");
}

TEST(CommandQueueTest, ALaunchWaitsForItsDevicesStillBeingStopped) {
  CommandQueue queue;
  queue.StopStarted("a", {1});
  queue.Push(Launch("b", 1, {1}));
  queue.Push(Launch("c", 1, {2}));
  EXPECT_EQ(Describe(queue.TakeReady()), "launch c/1");
  EXPECT_EQ(Describe(queue.TakeReady()), "none");
  queue.StopEnded("a", {1});
  EXPECT_EQ(Describe(queue.TakeReady()), "launch b/1");
}

TEST(CommandQueueTest, AStopOfAnotherJobDoesNotWaitForADevice) {
  CommandQueue queue;
  queue.StopStarted("a", {1});
  queue.Push(Stop("b", 1));
  EXPECT_EQ(Describe(queue.TakeReady()), "stop b/1");
}

TEST(CommandQueueTest, AnEarlierCommandOfTheJobHoldsUpItsLaterOnes) {
  CommandQueue queue;
  queue.StopStarted("a", {1});
  queue.Push(Launch("b", 1, {1}));  // waits for device 1
  queue.Push(Stop("b", 1));         // waits for b's launch
  queue.Push(Stop("c", 1));
  EXPECT_EQ(Describe(queue.TakeReady()), "stop c/1");
  EXPECT_EQ(Describe(queue.TakeReady()), "none");
  queue.StopEnded("a", {1});
  EXPECT_EQ(Describe(queue.TakeReady()), "launch b/1");
  EXPECT_EQ(Describe(queue.TakeReady()), "stop b/1");
}

TEST(CommandQueueTest, StopsAndTheirDevicesAreCountedOneByOne) {
  CommandQueue queue;
  queue.StopStarted("a", {1});
  queue.StopStarted("a", {2});
  queue.StopStarted("b", {1});
  queue.Push(Launch("a", 2, {3}));
  queue.Push(Launch("c", 1, {1}));
  EXPECT_FALSE(queue.HasReady());
  queue.StopEnded("a", {1});
  EXPECT_FALSE(queue.HasReady());  // a: one stop left; device 1: b's stop
  queue.StopEnded("b", {1});
  EXPECT_EQ(Describe(queue.TakeReady()), "launch c/1");
  EXPECT_FALSE(queue.HasReady());
  queue.StopEnded("a", {2});
  EXPECT_EQ(Describe(queue.TakeReady()), "launch a/2");
}

TEST(CommandQueueTest, LaunchIsIdempotentPerJobAndGeneration) {
  CommandQueue queue;
  EXPECT_EQ(queue.LatestGeneration("a"), std::nullopt);
  EXPECT_TRUE(queue.AcceptLaunch(Job("a", 2)));
  EXPECT_FALSE(queue.AcceptLaunch(Job("a", 2)));  // a repeat
  EXPECT_FALSE(queue.AcceptLaunch(Job("a", 1)));  // stale
  EXPECT_EQ(queue.LatestGeneration("a"), 2);
  EXPECT_TRUE(queue.AcceptLaunch(Job("b", 1)));  // each job its own
  EXPECT_TRUE(queue.AcceptLaunch(Job("a", 5)));
  EXPECT_EQ(queue.LatestGeneration("a"), 5);
  EXPECT_EQ(queue.LatestGeneration("b"), 1);
}

TEST(CommandQueueTest, RanksOfLaunchesQueuedAndUnderWay) {
  CommandQueue queue;
  queue.Push(Launch("b", 1, {2}, /*first_rank=*/4));
  queue.Push(Stop("b", 1));
  queue.Push(Launch("a", 2, {0, 1}));
  EXPECT_THAT(Describe(queue.QueuedRanks()), ElementsAre("b/1 rank 4", "a/2 rank 0", "a/2 rank 1"));
  EXPECT_THAT(queue.LaunchingRanks(), IsEmpty());

  EXPECT_EQ(Describe(queue.TakeReady()), "launch b/1");
  EXPECT_THAT(Describe(queue.LaunchingRanks()), ElementsAre("b/1 rank 4"));
  EXPECT_THAT(Describe(queue.QueuedRanks()), ElementsAre("a/2 rank 0", "a/2 rank 1"));
  EXPECT_EQ(Describe(queue.TakeReady()), "stop b/1");
  EXPECT_EQ(Describe(queue.TakeReady()), "launch a/2");
  // Under way, ordered by (job, generation).
  EXPECT_THAT(Describe(queue.LaunchingRanks()),
              ElementsAre("a/2 rank 0", "a/2 rank 1", "b/1 rank 4"));
  EXPECT_THAT(queue.QueuedRanks(), IsEmpty());
  queue.LaunchDone(Job("b", 1));
  EXPECT_THAT(Describe(queue.LaunchingRanks()), ElementsAre("a/2 rank 0", "a/2 rank 1"));
  queue.LaunchDone(Job("a", 2));
  EXPECT_THAT(queue.LaunchingRanks(), IsEmpty());
}

}  // namespace
}  // namespace ringmaster::agent
