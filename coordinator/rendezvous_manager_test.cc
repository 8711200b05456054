#include "coordinator/rendezvous_manager.h"

#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

class RendezvousManagerTest : public ::testing::Test {
 protected:
  RendezvousManagerTest() : manager_(&clock_, &registry_) {}

  // Registers a wait whose result lands in `*out`.
  void WaitInto(const std::string& job, int64_t gen, const std::string& key, absl::Duration d,
                std::optional<absl::StatusOr<std::string>>* out) {
    manager_.Wait(job, gen, key, clock_.Now() + d,
                  [out](absl::StatusOr<std::string> r) { *out = std::move(r); });
  }

  FakeClock clock_;
  metrics::Registry registry_;
  RendezvousManager manager_;
};

TEST_F(RendezvousManagerTest, SetThenGetAndWait) {
  ASSERT_TRUE(manager_.OpenGeneration("j", 1).ok());
  EXPECT_EQ(manager_.Get("j", 1, "nccl_id").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(manager_.Set("j", 1, "nccl_id", "abc").ok());
  EXPECT_EQ(*manager_.Get("j", 1, "nccl_id"), "abc");
  std::optional<absl::StatusOr<std::string>> got;
  WaitInto("j", 1, "nccl_id", absl::Seconds(1), &got);
  ASSERT_TRUE(got.has_value());  // Already set: answered at once.
  EXPECT_EQ(**got, "abc");
}

TEST_F(RendezvousManagerTest, WaitIsAnsweredBySetFromAnotherThread) {
  ASSERT_TRUE(manager_.OpenGeneration("j", 1).ok());
  std::vector<std::optional<absl::StatusOr<std::string>>> got(100);
  for (auto& g : got) WaitInto("j", 1, "k", absl::Minutes(1), &g);
  EXPECT_EQ(manager_.PendingWaiters(), 100);
  std::thread setter([&] { ASSERT_TRUE(manager_.Set("j", 1, "k", "v").ok()); });
  setter.join();
  for (auto& g : got) {
    ASSERT_TRUE(g.has_value());
    EXPECT_EQ(**g, "v");
  }
  EXPECT_EQ(manager_.PendingWaiters(), 0);
}

TEST_F(RendezvousManagerTest, WaitExpiresAtItsDeadlineOnly) {
  ASSERT_TRUE(manager_.OpenGeneration("j", 1).ok());
  std::optional<absl::StatusOr<std::string>> early, late;
  WaitInto("j", 1, "k", absl::Seconds(5), &early);
  WaitInto("j", 1, "k", absl::Seconds(30), &late);
  clock_.Advance(absl::Seconds(4));
  EXPECT_EQ(manager_.ExpireWaiters(), 0);
  EXPECT_FALSE(early.has_value());
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(manager_.ExpireWaiters(), 1);
  ASSERT_TRUE(early.has_value());
  EXPECT_EQ(early->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(late.has_value());
  // The expired waiter is not answered again when the key appears; the live one is.
  ASSERT_TRUE(manager_.Set("j", 1, "k", "v").ok());
  EXPECT_EQ(early->status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(**late, "v");
}

TEST_F(RendezvousManagerTest, StaleGenerationIsRefused) {
  ASSERT_TRUE(manager_.OpenGeneration("j", 1).ok());
  ASSERT_TRUE(manager_.Set("j", 1, "k", "old").ok());
  std::optional<absl::StatusOr<std::string>> waiting;
  WaitInto("j", 1, "other", absl::Minutes(1), &waiting);

  ASSERT_TRUE(manager_.OpenGeneration("j", 2).ok());
  // The old generation's waiter is released with a refusal.
  ASSERT_TRUE(waiting.has_value());
  EXPECT_EQ(waiting->status().code(), absl::StatusCode::kFailedPrecondition);
  // Old-generation requests are refused; the new store starts empty.
  EXPECT_EQ(manager_.Set("j", 1, "k", "poison").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager_.Get("j", 1, "k").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager_.Get("j", 2, "k").status().code(), absl::StatusCode::kNotFound);
  // Going back is refused; reopening the current one keeps its keys.
  EXPECT_EQ(manager_.OpenGeneration("j", 1).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(manager_.Set("j", 2, "k", "new").ok());
  ASSERT_TRUE(manager_.OpenGeneration("j", 2).ok());
  EXPECT_EQ(*manager_.Get("j", 2, "k"), "new");
}

TEST_F(RendezvousManagerTest, UnknownJobAndClosedJobAreRefused) {
  EXPECT_EQ(manager_.Set("nope", 1, "k", "v").code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(manager_.OpenGeneration("j", 1).ok());
  std::optional<absl::StatusOr<std::string>> waiting;
  WaitInto("j", 1, "k", absl::Minutes(1), &waiting);
  manager_.CloseJob("j");
  ASSERT_TRUE(waiting.has_value());
  EXPECT_EQ(waiting->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager_.Get("j", 1, "k").status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(RendezvousManagerTest, LimitsOnKeysAndValues) {
  ASSERT_TRUE(manager_.OpenGeneration("j", 1).ok());
  EXPECT_EQ(manager_.Set("j", 1, "", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(manager_.Set("j", 1, std::string(RendezvousManager::kMaxKeyBytes + 1, 'k'), "v").code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status big =
      manager_.Set("j", 1, "k", std::string(RendezvousManager::kMaxValueBytes + 1, 'v'));
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("value:"), std::string::npos) << big;
}

// A generation's keys and values together stay within kMaxBytesPerGeneration: a worker that sets
// key after key cannot grow the coordinator's memory without bound. Replacing a value counts
// only the difference; a new generation starts empty.
TEST_F(RendezvousManagerTest, AGenerationsKeysAndValuesHaveAByteBudget) {
  ASSERT_TRUE(manager_.OpenGeneration("j", 1).ok());
  const std::string mib(RendezvousManager::kMaxValueBytes, 'v');
  const size_t fits = RendezvousManager::kMaxBytesPerGeneration / (mib.size() + 8);
  for (size_t i = 0; i < fits; ++i) {
    ASSERT_TRUE(manager_.Set("j", 1, absl::StrFormat("key%05d", i), mib).ok()) << i;
  }
  absl::Status over = manager_.Set("j", 1, "key-over", mib);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  EXPECT_NE(over.message().find("more than 67108864"), std::string::npos) << over;
  EXPECT_TRUE(manager_.Set("j", 1, "key00000", mib).ok());  // a replacement: same size
  EXPECT_TRUE(manager_.Set("j", 1, "key00001", "small").ok());
  EXPECT_TRUE(manager_.Set("j", 1, "key-over", mib).ok());  // room was freed
  ASSERT_TRUE(manager_.OpenGeneration("j", 2).ok());
  EXPECT_TRUE(manager_.Set("j", 2, "key-over", mib).ok());
}

// A generation's unanswered waits are capped: past kMaxWaitersPerGeneration a wait is refused at
// once, naming the job; an answered one makes room, and another job has its own count.
TEST_F(RendezvousManagerTest, AGenerationsWaitsAreCapped) {
  ASSERT_TRUE(manager_.OpenGeneration("j", 1).ok());
  ASSERT_TRUE(manager_.OpenGeneration("other", 1).ok());
  int answered = 0;
  auto count = [&](absl::StatusOr<std::string>) { ++answered; };
  const absl::Time deadline = clock_.Now() + absl::Minutes(1);
  for (int64_t i = 0; i < RendezvousManager::kMaxWaitersPerGeneration; ++i) {
    manager_.Wait("j", 1, i % 2 == 0 ? "even" : "odd", deadline, count);
  }
  ASSERT_EQ(answered, 0);
  std::optional<absl::StatusOr<std::string>> over, elsewhere;
  WaitInto("j", 1, "even", absl::Minutes(1), &over);
  ASSERT_TRUE(over.has_value());
  EXPECT_EQ(over->status().code(), absl::StatusCode::kResourceExhausted) << over->status();
  EXPECT_NE(over->status().message().find("job j already has 262144 rendezvous waits"),
            std::string::npos)
      << over->status();
  WaitInto("other", 1, "k", absl::Minutes(1), &elsewhere);
  EXPECT_FALSE(elsewhere.has_value());
  // Answering the odd half frees room.
  ASSERT_TRUE(manager_.Set("j", 1, "odd", "v").ok());
  EXPECT_EQ(answered, RendezvousManager::kMaxWaitersPerGeneration / 2);
  std::optional<absl::StatusOr<std::string>> room;
  WaitInto("j", 1, "even", absl::Minutes(1), &room);
  EXPECT_FALSE(room.has_value());
}

// A wait that expires or is cancelled leaves nothing behind in its key's list (a worker waiting
// again and again on a key never set, or on key after key, would otherwise grow it).
TEST_F(RendezvousManagerTest, ExpiredAndCancelledWaitsLeaveNoTrace) {
  ASSERT_TRUE(manager_.OpenGeneration("j", 1).ok());
  auto ignore = [](absl::StatusOr<std::string>) {};
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 100; ++i) {
      manager_.Wait("j", 1, "never", clock_.Now() + absl::Seconds(1), ignore);
      manager_.Wait("j", 1, absl::StrCat("key", round, "-", i), clock_.Now() + absl::Seconds(1),
                    ignore);
    }
    manager_.Wait("j", 1, "never", clock_.Now() + absl::Minutes(1), ignore, /*owner=*/9);
    EXPECT_EQ(manager_.ListedWaiters(), 201);
    clock_.Advance(absl::Seconds(1));
    EXPECT_EQ(manager_.ExpireWaiters(), 200);
    EXPECT_EQ(manager_.ListedWaiters(), 1);
    EXPECT_EQ(manager_.CancelOwner(9), 1);
    EXPECT_EQ(manager_.ListedWaiters(), 0);
  }
  // A key's remaining waiter is still answered.
  std::optional<absl::StatusOr<std::string>> got;
  WaitInto("j", 1, "never", absl::Minutes(1), &got);
  manager_.Wait("j", 1, "never", clock_.Now() + absl::Seconds(1), ignore);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(manager_.ExpireWaiters(), 1);
  ASSERT_TRUE(manager_.Set("j", 1, "never", "now").ok());
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(**got, "now");
  EXPECT_EQ(manager_.ListedWaiters(), 0);
}

// Get and Wait refuse a key Set would refuse, naming it.
TEST_F(RendezvousManagerTest, GetAndWaitCheckTheKey) {
  ASSERT_TRUE(manager_.OpenGeneration("j", 1).ok());
  auto got = manager_.Get("j", 1, std::string(RendezvousManager::kMaxKeyBytes + 1, 'k'));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find("key: must be 1-512 bytes, got 513"), std::string::npos)
      << got.status();
  std::optional<absl::StatusOr<std::string>> waited;
  WaitInto("j", 1, "", absl::Minutes(1), &waited);
  ASSERT_TRUE(waited.has_value());
  EXPECT_EQ(waited->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(manager_.PendingWaiters(), 0);
}

TEST_F(RendezvousManagerTest, ExportsWaitLatencyAndRequestCounts) {
  ASSERT_TRUE(manager_.OpenGeneration("j", 1).ok());
  std::optional<absl::StatusOr<std::string>> got;
  WaitInto("j", 1, "k", absl::Minutes(1), &got);
  clock_.Advance(absl::Milliseconds(300));
  ASSERT_TRUE(manager_.Set("j", 1, "k", "v").ok());
  std::string text = registry_.RenderText();
  EXPECT_NE(text.find("ringmaster_rendezvous_wait_seconds_bucket{le=\"0.256\"} 0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ringmaster_rendezvous_wait_seconds_bucket{le=\"1.024\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ringmaster_rendezvous_requests_total{op=\"set\",code=\"OK\"} 1"),
            std::string::npos)
      << text;
}

TEST_F(RendezvousManagerTest, ExportsTheWaitersOfEachJobUntilItIsClosed) {
  ASSERT_TRUE(manager_.OpenGeneration("a", 1).ok());
  ASSERT_TRUE(manager_.OpenGeneration("b", 1).ok());
  std::optional<absl::StatusOr<std::string>> a1, a2, a3, b1;
  WaitInto("a", 1, "k", absl::Minutes(1), &a1);
  WaitInto("a", 1, "k", absl::Minutes(1), &a2);
  WaitInto("a", 1, "other", absl::Seconds(1), &a3);
  WaitInto("b", 1, "k", absl::Minutes(1), &b1);
  auto has = [&](const std::string& line) {
    return registry_.RenderText().find(line + "\n") != std::string::npos;
  };
  EXPECT_TRUE(has("ringmaster_rendezvous_waiters{job_id=\"a\"} 3")) << registry_.RenderText();
  EXPECT_TRUE(has("ringmaster_rendezvous_waiters{job_id=\"b\"} 1"));
  ASSERT_TRUE(manager_.Set("a", 1, "k", "v").ok());  // answers two
  EXPECT_TRUE(has("ringmaster_rendezvous_waiters{job_id=\"a\"} 1"));
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(manager_.ExpireWaiters(), 1);  // and the deadline the third
  EXPECT_TRUE(has("ringmaster_rendezvous_waiters{job_id=\"a\"} 0"));
  ASSERT_TRUE(manager_.OpenGeneration("b", 2).ok());  // a new generation fails the old waiters
  EXPECT_TRUE(has("ringmaster_rendezvous_waiters{job_id=\"b\"} 0"));
  manager_.CloseJob("a");
  EXPECT_EQ(registry_.RenderText().find("job_id=\"a\""), std::string::npos);
}

TEST_F(RendezvousManagerTest, CancellingAStreamDropsOnlyItsWaitsWithoutAnsweringThem) {
  ASSERT_TRUE(manager_.OpenGeneration("j", 1).ok());
  int dead_answers = 0;
  std::optional<absl::StatusOr<std::string>> live;
  const absl::Time deadline = clock_.Now() + absl::Minutes(1);
  auto dead = [&](absl::StatusOr<std::string>) { ++dead_answers; };
  manager_.Wait("j", 1, "k", deadline, dead, /*owner=*/7);
  manager_.Wait("j", 1, "other", deadline, dead, /*owner=*/7);
  manager_.Wait(
      "j", 1, "k", deadline, [&](absl::StatusOr<std::string> r) { live = r; }, 8);
  auto has = [&](const std::string& line) {
    return registry_.RenderText().find(line + "\n") != std::string::npos;
  };
  EXPECT_TRUE(has("ringmaster_rendezvous_waiters{job_id=\"j\"} 3")) << registry_.RenderText();

  EXPECT_EQ(manager_.CancelOwner(7), 2);
  EXPECT_EQ(manager_.PendingWaiters(), 1);
  EXPECT_TRUE(has("ringmaster_rendezvous_waiters{job_id=\"j\"} 1")) << registry_.RenderText();
  EXPECT_TRUE(has("ringmaster_rendezvous_requests_total{op=\"wait\",code=\"CANCELLED\"} 2"))
      << registry_.RenderText();
  EXPECT_EQ(manager_.CancelOwner(7), 0);
  EXPECT_EQ(manager_.CancelOwner(0), 0) << "0 owns nothing";

  // The key set later answers only the live stream; the dropped ones neither answer nor expire.
  ASSERT_TRUE(manager_.Set("j", 1, "k", "v").ok());
  ASSERT_TRUE(live.has_value());
  EXPECT_EQ(**live, "v");
  clock_.Advance(absl::Minutes(2));
  EXPECT_EQ(manager_.ExpireWaiters(), 0);
  EXPECT_EQ(dead_answers, 0);
  EXPECT_TRUE(has("ringmaster_rendezvous_waiters{job_id=\"j\"} 0"));
}

}  // namespace
}  // namespace ringmaster::coordinator
