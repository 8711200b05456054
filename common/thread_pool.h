// ThreadPool: a fixed number of threads (at least one) starting posted tasks in the order they
// were posted (each on whichever thread is free; with several threads they may end in any order).
// For work that may block, kept off threads that must not (gRPC's callback threads).
//
// Thread-safe. The destructor runs every task already posted, then joins the threads; a task
// must not post to a pool being destroyed.
#ifndef RINGMASTER_COMMON_THREAD_POOL_H_
#define RINGMASTER_COMMON_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ringmaster {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Post(std::function<void()> task);

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_THREAD_POOL_H_
