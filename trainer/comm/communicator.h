// One communication group (all ranks of a job, a data-parallel group, a tensor-parallel group,
// a pipeline's neighbours): the collectives and point-to-point operations the trainer uses,
// each timed, counted and numbered.
//
// Backends (Gloo on CPU memory, NCCL on GPU memory) implement the Do* methods; this base class
// does the bookkeeping, so every backend measures the same way:
//  - entered() / completed(): the sequence number of the last operation entered / completed on
//    this communicator (from 1). A rank whose entered() is behind its peers' has not reached
//    the collective they wait in.
//  - TakeTotals(): count, bytes and seconds per operation since the last call (collective_stats.h
//    for the byte and bandwidth definitions). The seconds are the wall time of the Do* call,
//    unless the backend measured the operation itself (RecordDeviceSeconds: a GPU backend times
//    the collective on its stream with events, excluding the wait for the data to be ready).
//
// Element types: reductions (AllReduce, ReduceScatter) take kF32, and kBF16 where the backend
// says it can (CanReduce; NCCL can, Gloo cannot); the data-moving operations take any dtype.
//
// Contract: every member calls the collectives in the same order with matching sizes. One
// thread at a time issues operations on a communicator; entered(), completed() and TakeTotals()
// may be called from any thread. Errors: UNAVAILABLE when a peer is lost or the transport fails,
// DEADLINE_EXCEEDED when an operation exceeds the communicator's timeout (both retryable: the
// job restarts), INVALID_ARGUMENT for mismatched buffer sizes (a programming error surfaced as
// a Status). After an error the communicator must not be used again.
#ifndef RINGMASTER_TRAINER_COMM_COMMUNICATOR_H_
#define RINGMASTER_TRAINER_COMM_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "trainer/comm/collective_stats.h"
#include "trainer/model/device.h"
#include "trainer/model/tensor.h"

namespace ringmaster::trainer {

class Communicator {
 public:
  virtual ~Communicator() = default;

  // Group name ("world", "dp0", "tp1", "pp0", ...), the `group` label of its metrics.
  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  // How the group's data travels: "gloo" (TCP), "shm" (collectives in one machine's shared
  // memory, point to point over Gloo on loopback) or "nccl".
  virtual const char* transport() const = 0;

  // data = sum over ranks of data (kF32, or a dtype CanReduce accepts), in place.
  absl::Status AllReduce(Tensor data);
  // output = sum over ranks of input's chunk rank(): input.size == size() * output.size (same
  // dtype, one CanReduce accepts).
  absl::Status ReduceScatter(Tensor input, Tensor output);
  // output = concatenation of every rank's input: output.size == size() * input.size. input may
  // be output's own chunk (in place).
  absl::Status AllGather(Tensor input, Tensor output);
  // data = root's data.
  absl::Status Broadcast(Tensor data, int root);
  // Point to point, matched in order per (sender, receiver) pair. A Send may wait until the
  // peer posts the matching receive (Gloo and NCCL both rendezvous), so two ranks that send to
  // each other at the same time must use Exchange instead.
  absl::Status Send(Tensor data, int peer);
  absl::Status Recv(Tensor data, int peer);
  // Sends `send` to `peer` and receives `recv` from it, both posted before either is waited for
  // (NCCL: one group of ncclSend + ncclRecv). The send counts as the next Send to `peer` and the
  // receive as the next Recv from it, so it matches the peer's Exchange, or its Recv and Send in
  // either order. The pipeline uses it where neighbours pass activations one way and gradients
  // the other at the same moment. Counted as one operation (entered/completed) and in the totals
  // as one send and one receive, each with the exchange's time.
  absl::Status Exchange(Tensor send, Tensor recv, int peer);
  // Waits until every member has reached it. Not counted in the totals.
  absl::Status Barrier();
  // Each flags[i] = whether any member passed it true (one all-reduce of flags.size() floats;
  // every member passes as many). Counted in entered() and completed() like every collective, so
  // a member that never reaches it is blamed for a hang, but not in the totals: it is a
  // decision, not data, and would only blur the group's busbw.
  absl::Status AnyOf(absl::Span<bool> flags);

  // While it lives, the operations this thread issues on `comm` read and write device memory
  // only after the device work `mark` covers (Device::Mark, taken by the thread that issued the
  // work producing and last reading the buffers), instead of after all the work issued on the
  // device by the time each operation starts. Meant to wrap one operation run by a
  // communication thread. Backends whose device work is done when issued (Gloo, shared memory)
  // ignore it; a null mark changes nothing.
  class ScopedOrder {
   public:
    ScopedOrder(Communicator* comm, std::shared_ptr<const DeviceMark> mark) : comm_(comm) {
      comm_->order_after_ = std::move(mark);
    }
    ~ScopedOrder() { comm_->order_after_ = nullptr; }
    ScopedOrder(const ScopedOrder&) = delete;
    ScopedOrder& operator=(const ScopedOrder&) = delete;

   private:
    Communicator* const comm_;
  };

  // The process has given up on the group after a failure: tearing it down must not wait for
  // peers, which may be gone (NCCL: an operation another thread is waiting for ends CANCELLED
  // and aborts the communicator, and teardown aborts instead of finalizing). Gloo and shared
  // memory have nothing to wait for. Thread-safe; the group must not be used afterwards.
  virtual void Abandon() {}

  int64_t entered() const { return entered_.load(std::memory_order_relaxed); }
  int64_t completed() const { return completed_.load(std::memory_order_relaxed); }
  std::vector<OpTotals> TakeTotals();

  // Seconds the calling thread has spent in operations (AnyOf included, failed ones too) of any
  // communicator since it started: the time it was blocked in communication. Each operation
  // counts its own time as the totals do: the backend's measure where it gives one (NCCL: the
  // collective on its stream, from when its input was ready, so not the wait for this rank's own
  // kernels that the call also sits through), else the call's wall time; an operation that a
  // backend runs inside another (shared memory's point to point over Gloo) counts once. The
  // trainer subtracts its growth over a forward or backward pass from the pass's compute time,
  // so a rank waiting for a slow tensor-parallel peer does not look slow itself. A thread's waits
  // for communication that another thread runs for it (CommQueue) count too (CountThreadWait).
  static double ThreadSeconds();
  // The calling thread was blocked `seconds` waiting for communication another thread ran for it
  // (a ZeRO gather or reduction on the communication queue): counted in ThreadSeconds, unless
  // the thread is inside an operation itself (then that operation counts).
  static void CountThreadWait(double seconds);

 protected:
  Communicator(std::string name, int rank, int size)
      : name_(std::move(name)), rank_(rank), size_(size) {}

  // Whether this backend sums elements of `dtype` (AllReduce, ReduceScatter). kF32 only here.
  virtual bool CanReduce(DType dtype) const { return dtype == DType::kF32; }
  // Called from inside a Do* method: the operation itself took `seconds`, which the totals then
  // use instead of the call's wall time. Only the thread running the Do* call may call it.
  void RecordDeviceSeconds(double seconds) { device_seconds_ = seconds; }
  // The mark of the ScopedOrder around the current operation; null when none.
  const DeviceMark* order_after() const { return order_after_.get(); }

  virtual absl::Status DoAllReduce(Tensor data) = 0;
  virtual absl::Status DoReduceScatter(Tensor input, Tensor output) = 0;
  virtual absl::Status DoAllGather(Tensor input, Tensor output) = 0;
  virtual absl::Status DoBroadcast(Tensor data, int root) = 0;
  virtual absl::Status DoSend(Tensor data, int peer) = 0;
  virtual absl::Status DoRecv(Tensor data, int peer) = 0;
  virtual absl::Status DoExchange(Tensor send, Tensor recv, int peer) = 0;
  virtual absl::Status DoBarrier() = 0;

 private:
  struct Counted {
    CollectiveOp op;
    int64_t bytes;
  };
  // Runs one operation: sequence numbers, timing, and totals for each entry of `counted`.
  absl::Status Run(std::vector<Counted> counted, const std::function<absl::Status()>& body);
  absl::Status CheckPeer(int peer) const;

  const std::string name_;
  const int rank_;
  const int size_;
  std::atomic<int64_t> entered_{0};
  std::atomic<int64_t> completed_{0};
  // Set by RecordDeviceSeconds during the current operation; < 0 when not. Touched only by the
  // (one) thread issuing operations.
  double device_seconds_ = -1;
  // Set by ScopedOrder; touched only by the thread issuing operations.
  std::shared_ptr<const DeviceMark> order_after_;
  absl::Mutex mu_;
  CollectiveTotals totals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_COMM_COMMUNICATOR_H_
