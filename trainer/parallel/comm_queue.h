// A thread that runs communication work in the order it was queued, so collectives overlap the
// caller's computation (the backward pass) while keeping one issuing thread per communicator.
// After the first failure the remaining work is skipped; Drain() reports that failure.
// Destruction waits for the queued work, unless Abandon() was called: then only for the work
// already running.
#ifndef RINGMASTER_TRAINER_PARALLEL_COMM_QUEUE_H_
#define RINGMASTER_TRAINER_PARALLEL_COMM_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "trainer/comm/communicator.h"
#include "trainer/model/device.h"

namespace ringmaster::trainer {

class CommQueue {
 public:
  CommQueue();
  // Waits for queued work to finish (after Abandon: only the running one), then stops the
  // thread.
  ~CommQueue();

  // Queues `work`; thread-safe. Returns its ticket (1, 2, ... in queue order).
  int64_t Enqueue(std::function<absl::Status()> work);
  // Queues `work`, a collective on `comm` over device buffers that the work issued on `device` so
  // far writes or reads: it runs ordered after that work only (a Device::Mark taken now, held by
  // a Communicator::ScopedOrder around `work`), not after everything issued by the time it
  // starts. Call it from the thread issuing the device work. Returns its ticket.
  int64_t EnqueueCollective(Device* device, Communicator* comm, std::function<absl::Status()> work);
  // Waits until the work of `ticket` (and everything before it) has run; returns the first error
  // so far (without clearing it).
  absl::Status WaitFor(int64_t ticket);
  // Waits until everything queued so far has run; returns the first error since the last Drain
  // (and clears it).
  absl::Status Drain();
  // WaitFor and Drain count the caller's wait in Communicator::ThreadSeconds: the wait, less the
  // time the queue's thread spent in the work that finished while the caller waited outside
  // communicators' operations (each operation measured as ThreadSeconds measures it, so a GPU
  // collective's wait for this rank's own kernels is not communication), counted whole. The
  // queue's thread does nothing else: the rest of the wait is communication, also the moments
  // the thread takes to pick the work up (on a busy host, milliseconds), so a rank's wait for a
  // slow peer's share of a ZeRO gather, or for a reduction over a slow link, is not its compute.

  // Whether a thread is in WaitFor or Drain now for work not yet done (for tests; with one
  // waiting thread at a time, as the trainer's, only).
  bool blocked();
  // The caller has failed: work queued and not yet started is skipped from now on (its peers
  // may never join it), and so is work queued later; WaitFor and Drain then report CANCELLED
  // (unless an earlier error). Thread-safe.
  void Abandon();

 private:
  void Loop();
  // Waits until ticket `ticket` is done, counting the wait (see WaitFor).
  void AwaitCounted(int64_t ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::deque<std::function<absl::Status()>> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t queued_ ABSL_GUARDED_BY(mu_) = 0;  // tickets handed out
  int64_t done_ ABSL_GUARDED_BY(mu_) = 0;    // tickets finished (run or skipped)
  // The thread's time in finished work outside communicators' operations (its wall time less
  // its ThreadSeconds).
  double other_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t waiting_for_ ABSL_GUARDED_BY(mu_) = 0;  // the ticket a caller waits for, 0: none
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_PARALLEL_COMM_QUEUE_H_
