// CommQueue: work runs in order on its own thread; after a failure the rest is skipped; the
// destructor runs what is queued, unless the caller abandoned the queue (then only the work
// already running finishes).
#include "trainer/parallel/comm_queue.h"

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "trainer/comm/no_op_communicator.h"

namespace ringmaster::trainer {
namespace {

// A one-rank backend whose all-reduce lasts until released and reports `reported` seconds as
// its own measure of itself (as NCCL's event timing does).
class GatedCommunicator final : public testing::NoOpCommunicator {
 public:
  explicit GatedCommunicator(double reported)
      : NoOpCommunicator("dp0", 0, 1), reported_(reported) {}
  absl::Notification release;

 protected:
  absl::Status DoAllReduce(Tensor) override {
    release.WaitForNotification();
    RecordDeviceSeconds(reported_);
    return absl::OkStatus();
  }

 private:
  const double reported_;
};

// A caller's wait for queued communication counts in its Communicator::ThreadSeconds: all of
// the wait when the operation it waited for took longer; when the backend measured the operation
// as taking no time, not the operation's time (the rest of it was not communication), only the
// moments the queue's thread took to pick the work up. The operation is held for at least 50 ms.
TEST(CommQueueTest, AWaitCountsAsCommunicationExceptTheQueuesOtherWork) {
  constexpr double kHeld = 0.05;
  for (const double reported : {1000.0, 0.0}) {
    GatedCommunicator comm(reported);  // declared first: it outlives the queue's thread
    CommQueue queue;
    float value = 1;
    const int64_t ticket = queue.Enqueue([&] {
      return comm.AllReduce(Tensor{&value, 1, DType::kF32});
    });
    std::thread releaser([&] {
      while (!queue.blocked() || comm.entered() == 0) std::this_thread::yield();
      const auto entered = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - entered < std::chrono::duration<double>(kHeld)) {
        std::this_thread::yield();  // the operation's own time
      }
      comm.release.Notify();
    });
    const double before = Communicator::ThreadSeconds();
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(queue.WaitFor(ticket).ok());
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    releaser.join();
    const double counted = Communicator::ThreadSeconds() - before;
    EXPECT_LE(counted, wall);
    if (reported > 0) {
      EXPECT_GE(counted, kHeld);
    } else {
      EXPECT_LE(counted, wall - kHeld);
    }
    EXPECT_FALSE(queue.blocked());
  }
}

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
