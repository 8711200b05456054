#include "common/thread_pool.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace ringmaster {
namespace {

// A task that blocks holds one thread; the others go on running what was posted after it.
TEST(ThreadPoolTest, ABlockedTaskDoesNotHoldTheOthersUp) {
  ThreadPool pool(2);
  absl::Notification release, ran;
  pool.Post([&] { release.WaitForNotification(); });
  pool.Post([&] { ran.Notify(); });
  // Behind the first, the second would never run (a timeout, then the test fails).
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(60)));
  release.Notify();
}

// The destructor runs every task posted before it, then returns.
TEST(ThreadPoolTest, DestroyingRunsWhatWasPosted) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(3);
    for (int i = 0; i < 1000; ++i) pool.Post([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 1000);
}

// One thread runs the tasks in the order they were posted.
TEST(ThreadPoolTest, OneThreadRunsTasksInOrder) {
  std::vector<int> order;
  {
    ThreadPool pool(1);
    for (int i = 0; i < 100; ++i) pool.Post([&order, i] { order.push_back(i); });
  }
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

}  // namespace
}  // namespace ringmaster
