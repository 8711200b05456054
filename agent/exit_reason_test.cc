#include "agent/exit_reason.h"

#include <string>

#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

ExitInfo Exited(int code, std::string last_line = "") {
  return ExitInfo{code, 0, std::move(last_line)};
}
ExitInfo Killed(int signal, std::string last_line = "") {
  return ExitInfo{-1, signal, std::move(last_line)};
}

TEST(ExitReasonTest, ASuccessNeedsNone) {
  EXPECT_EQ(ExitReason(Exited(0, "training done"), ExitAnnouncement{0, "done"}), "");
  EXPECT_EQ(ExitReason(Exited(0, "training done"), std::nullopt), "");
}

TEST(ExitReasonTest, TheAnnouncedReasonWhenTheExitIsTheAnnouncedOne) {
  EXPECT_EQ(ExitReason(Exited(75, "E1125 trainer failed ..."),
                       ExitAnnouncement{75, "UNAVAILABLE: all_reduce on tp0: peer lost"}),
            "UNAVAILABLE: all_reduce on tp0: peer lost");
}

TEST(ExitReasonTest, AnAnnouncedReasonStaysTheRootCauseWhenTheWorkerEndsOtherwise) {
  const ExitAnnouncement announced{75, "UNAVAILABLE: all_reduce timed out"};
  EXPECT_EQ(ExitReason(Killed(9, "step 12"), announced),
            "after announcing exit 75: UNAVAILABLE: all_reduce timed out");
  EXPECT_EQ(ExitReason(Exited(1, "terminate called"), announced),
            "after announcing exit 75: UNAVAILABLE: all_reduce timed out");
  // A worker that announced success and then failed.
  EXPECT_EQ(ExitReason(Killed(6), ExitAnnouncement{0, "done"}), "after announcing exit 0: done");
}

TEST(ExitReasonTest, WithoutAnAnnouncementTheLastLineOfOutput) {
  EXPECT_EQ(ExitReason(Killed(9, "step 12/30 loss 4.1"), std::nullopt),
            "last output: step 12/30 loss 4.1");
  EXPECT_EQ(ExitReason(Exited(1, "RuntimeError: NCCL error"), std::nullopt),
            "last output: RuntimeError: NCCL error");
  EXPECT_EQ(ExitReason(Exited(1), std::nullopt), "");
  // A worker the agent stopped: its line from before the stop, also when it exits cleanly.
  EXPECT_EQ(ExitReason(ExitInfo{-1, 15, "waiting for shard 7", /*stopped=*/true}, std::nullopt),
            "last output before the stop: waiting for shard 7");
  EXPECT_EQ(ExitReason(ExitInfo{0, 0, "waiting for shard 7", /*stopped=*/true}, std::nullopt),
            "last output before the stop: waiting for shard 7");
  // An announcement that says nothing is none.
  EXPECT_EQ(ExitReason(Exited(1, "Traceback"), ExitAnnouncement{1, " \n"}),
            "last output: Traceback");
}

TEST(ExitReasonTest, ALikelyOutOfMemoryGoesFirst) {
  const std::string oom =
      "likely out of memory (the kernel's OOM killer killed 1 process on this node in the 10.0 "
      "s before)";
  EXPECT_EQ(ExitReason(Killed(9, "step 12"), std::nullopt, oom), oom + ": last output: step 12");
  EXPECT_EQ(ExitReason(Killed(9), std::nullopt, oom), oom);
  // A program whose child the killer took fails its own way.
  EXPECT_EQ(ExitReason(Exited(1), ExitAnnouncement{1, "DataLoader worker killed"}, oom),
            oom + ": DataLoader worker killed");
}

TEST(ExitReasonTest, OneBoundedLine) {
  const std::string got =
      ExitReason(Exited(78), ExitAnnouncement{78, "INVALID_ARGUMENT:\n" + std::string(2000, 'x')});
  EXPECT_EQ(got.size(), kExitReasonBytes);
  EXPECT_EQ(got.rfind("INVALID_ARGUMENT: xxx", 0), 0u) << got;
  EXPECT_EQ(got.substr(got.size() - 3), "...");
}

}  // namespace
}  // namespace ringmaster::agent
