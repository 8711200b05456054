#include "trainer/parallel/comm_queue.h"

namespace ringmaster::trainer {

CommQueue::CommQueue() : thread_([this] { Loop(); }) {}

CommQueue::~CommQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void CommQueue::Enqueue(std::function<absl::Status()> work) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(work));
}

absl::Status CommQueue::Drain() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](CommQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
        return q->queue_.empty() && q->running_ == 0;
      },
      this));
  absl::Status error = error_;
  error_ = absl::OkStatus();
  return error;
}

void CommQueue::Loop() {
  for (;;) {
    std::function<absl::Status()> work;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CommQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
            return !q->queue_.empty() || q->stopping_;
          },
          this));
      if (queue_.empty()) return;  // stopping, nothing left
      work = std::move(queue_.front());
      queue_.pop_front();
      if (!error_.ok()) continue;  // skip work after a failure
      running_ = 1;
    }
    absl::Status status = work();
    absl::MutexLock lock(&mu_);
    running_ = 0;
    if (!status.ok() && error_.ok()) error_ = status;
  }
}

}  // namespace ringmaster::trainer
