#include "trainer/cuda/async_wait.h"

#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

// Options on a fake clock whose "sleep" advances it.
struct FakeTime {
  FakeClock clock;
  WaitOptions Options(absl::Duration timeout) {
    WaitOptions o;
    o.timeout = timeout;
    o.clock = &clock;
    o.sleep = [this](absl::Duration d) { clock.Advance(d); };
    return o;
  }
};

TEST(AsyncWaitTest, DoneAtOnce) {
  FakeTime t;
  int polls = 0;
  EXPECT_TRUE(
      AwaitCompletion([&] { return Poll{++polls == 1 ? PollState::kDone : PollState::kFailed}; },
                      "op", t.Options(absl::Seconds(1)))
          .ok());
  EXPECT_EQ(polls, 1);
}

TEST(AsyncWaitTest, ZeroTimeoutStillPollsOnce) {
  FakeTime t;
  int polls = 0;
  EXPECT_TRUE(AwaitCompletion(
                  [&] {
                    ++polls;
                    return Poll{PollState::kDone};
                  },
                  "op", t.Options(absl::ZeroDuration()))
                  .ok());
  EXPECT_EQ(polls, 1);
}

TEST(AsyncWaitTest, DoneAfterManyPolls) {
  FakeTime t;
  int polls = 0;
  EXPECT_TRUE(
      AwaitCompletion([&] { return Poll{++polls < 500 ? PollState::kPending : PollState::kDone}; },
                      "op", t.Options(absl::Seconds(10)))
          .ok());
  EXPECT_EQ(polls, 500);
}

TEST(AsyncWaitTest, FailureCarriesItsError) {
  FakeTime t;
  int polls = 0;
  const absl::Status s = AwaitCompletion(
      [&] {
        if (++polls < 3) return Poll{PollState::kPending};
        return Poll{PollState::kFailed, absl::UnavailableError("remote peer closed")};
      },
      "all_reduce", t.Options(absl::Seconds(10)));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "remote peer closed");
  // A failure without a reason is still a failure.
  EXPECT_EQ(
      AwaitCompletion([] { return Poll{PollState::kFailed}; }, "x", t.Options(absl::Seconds(1)))
          .code(),
      absl::StatusCode::kInternal);
}

TEST(AsyncWaitTest, NeverDoneIsADeadlineAfterTheTimeout) {
  FakeTime t;
  const absl::Time start = t.clock.Now();
  int polls = 0;
  const absl::Status s = AwaitCompletion(
      [&] {
        ++polls;
        return Poll{PollState::kPending};
      },
      "ncclCommInitRankConfig of dp0", t.Options(absl::Seconds(2)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("ncclCommInitRankConfig of dp0 did not complete within 2s"),
            std::string::npos)
      << s;
  const absl::Duration waited = t.clock.Now() - start;
  EXPECT_GE(waited, absl::Seconds(2));
  EXPECT_LE(waited, absl::Seconds(2) + absl::Milliseconds(1));  // noticed within one pause
  EXPECT_GT(polls, 100);
}

TEST(AsyncWaitTest, PausesSpinThenBackOffToFiftyMicroseconds) {
  EXPECT_EQ(PollPause(0), absl::ZeroDuration());
  EXPECT_EQ(PollPause(99), absl::ZeroDuration());
  EXPECT_EQ(PollPause(100), absl::Microseconds(10));
  EXPECT_EQ(PollPause(101), absl::Microseconds(20));
  EXPECT_EQ(PollPause(102), absl::Microseconds(40));
  EXPECT_EQ(PollPause(103), absl::Microseconds(50));
  EXPECT_EQ(PollPause(100000), absl::Microseconds(50));
}

// Another thread gives up on the wait (the trainer abandoning its groups): it ends at the next
// poll, long before its timeout, with CANCELLED; a completion already there still counts.
TEST(AsyncWaitTest, AnAbandonedWaitEndsCancelledAtTheNextPoll) {
  FakeTime t;
  std::atomic<bool> abandoned{false};
  WaitOptions options = t.Options(absl::Seconds(600));
  options.abandoned = &abandoned;
  const absl::Time start = t.clock.Now();
  int polls = 0;
  const absl::Status s = AwaitCompletion(
      [&] {
        if (++polls == 150) abandoned.store(true);
        return Poll{PollState::kPending};
      },
      "all_reduce on dp0", options);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_EQ(s.message(), "all_reduce on dp0: abandoned before it completed");
  EXPECT_EQ(polls, 150);
  EXPECT_LT(t.clock.Now() - start, absl::Seconds(1));

  polls = 0;
  EXPECT_TRUE(
      AwaitCompletion([&] { return Poll{++polls == 1 ? PollState::kDone : PollState::kFailed}; },
                      "op", options)
          .ok());
}

}  // namespace
}  // namespace ringmaster::trainer
