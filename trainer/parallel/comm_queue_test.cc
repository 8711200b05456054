// CommQueue: work runs in order on its own thread; after a failure the rest is skipped; the
// destructor runs what is queued, unless the caller abandoned the queue (then only the work
// already running finishes).
#include "trainer/parallel/comm_queue.h"

#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

TEST(CommQueueTest, RunsInOrderAndSkipsWhatFollowsAFailure) {
  CommQueue queue;
  std::vector<int> ran;  // only the queue's thread writes it; read after Drain
  queue.Enqueue([&] {
    ran.push_back(1);
    return absl::OkStatus();
  });
  const int64_t second = queue.Enqueue([&] {
    ran.push_back(2);
    return absl::UnavailableError("peer lost");
  });
  queue.Enqueue([&] {
    ran.push_back(3);
    return absl::OkStatus();
  });
  EXPECT_EQ(queue.WaitFor(second).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(queue.Drain().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
  EXPECT_TRUE(queue.Drain().ok()) << "Drain clears the error it reported";
}

TEST(CommQueueTest, TheDestructorRunsWhatIsQueued) {
  std::vector<int> ran;
  {
    absl::Notification release;  // declared first: it outlives the queue's thread
    CommQueue queue;
    queue.Enqueue([&] {
      release.WaitForNotification();
      ran.push_back(1);
      return absl::OkStatus();
    });
    queue.Enqueue([&] {
      ran.push_back(2);
      return absl::OkStatus();
    });
    release.Notify();
  }
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
}

TEST(CommQueueTest, AnAbandonedQueueFinishesOnlyTheRunningWork) {
  std::vector<int> ran;
  {
    absl::Notification started, release;  // declared first: they outlive the queue's thread
    CommQueue queue;
    queue.Enqueue([&] {
      started.Notify();
      release.WaitForNotification();
      ran.push_back(1);
      return absl::OkStatus();
    });
    queue.Enqueue([&] {
      ran.push_back(2);  // a collective whose peers are gone: never started
      return absl::OkStatus();
    });
    started.WaitForNotification();
    queue.Abandon();
    queue.Enqueue([&] {
      ran.push_back(3);
      return absl::OkStatus();
    });
    release.Notify();
    EXPECT_EQ(queue.Drain().code(), absl::StatusCode::kCancelled) << "skipped work is not done";
  }
  EXPECT_EQ(ran, (std::vector<int>{1}));
}

}  // namespace
}  // namespace ringmaster::trainer
