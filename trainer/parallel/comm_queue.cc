#include "trainer/parallel/comm_queue.h"

#include <algorithm>
#include <chrono>

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
  AwaitCounted(ticket);
  return error_;
}

absl::Status CommQueue::Drain() {
  absl::MutexLock lock(&mu_);
  AwaitCounted(queued_);  // every ticket runs or is skipped, in order
  absl::Status error = error_;
  error_ = absl::OkStatus();
  return error;
}

bool CommQueue::blocked() {
  absl::MutexLock lock(&mu_);
  return waiting_for_ > done_;
}

void CommQueue::AwaitCounted(int64_t ticket) {
  if (done_ >= ticket) return;
  const auto start = std::chrono::steady_clock::now();
  const double other_before = other_seconds_;
  waiting_for_ = ticket;
  auto done = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ >= ticket; };
  mu_.Await(absl::Condition(&done));
  waiting_for_ = 0;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Communicator::CountThreadWait(std::max(0.0, wall - (other_seconds_ - other_before)));
}

void CommQueue::Loop() {
  for (;;) {
    std::function<absl::Status()> work;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CommQueue* q)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) { return !q->queue_.empty() || q->stopping_; },
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
    const double comm_before = Communicator::ThreadSeconds();
    const auto start = std::chrono::steady_clock::now();
    absl::Status status = work();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double comm = Communicator::ThreadSeconds() - comm_before;
    absl::MutexLock lock(&mu_);
    other_seconds_ += std::max(0.0, wall - comm);
    running_ = 0;
    ++done_;
    if (!status.ok() && error_.ok()) error_ = status;
  }
}

}  // namespace ringmaster::trainer
