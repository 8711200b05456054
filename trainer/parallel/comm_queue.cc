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

int64_t CommQueue::Enqueue(std::function<absl::Status()> work) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(work));
  return ++queued_;
}

int64_t CommQueue::EnqueueCollective(Device* device, Communicator* comm,
                                     std::function<absl::Status()> work) {
  return Enqueue([comm, issued = device->Mark(), work = std::move(work)] {
    Communicator::ScopedOrder order(comm, issued);
    return work();
  });
}

void CommQueue::Abandon() {
  absl::MutexLock lock(&mu_);
  abandoned_ = true;
}

absl::Status CommQueue::WaitFor(int64_t ticket) {
  absl::MutexLock lock(&mu_);
  auto done = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ >= ticket; };
  mu_.Await(absl::Condition(&done));
  return error_;
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
      if (!error_.ok() || abandoned_) {  // skip work after a failure
        if (error_.ok()) error_ = absl::CancelledError("communication work abandoned");
        ++done_;
        continue;
      }
      running_ = 1;
    }
    absl::Status status = work();
    absl::MutexLock lock(&mu_);
    running_ = 0;
    ++done_;
    if (!status.ok() && error_.ok()) error_ = status;
  }
}

}  // namespace ringmaster::trainer
