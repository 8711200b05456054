// A write queue for one gRPC callback-API stream (server or client side): messages may be queued
// from any thread at any time and are written one at a time, in order (the callback API allows
// one write in flight).
//
// gRPC may run a reaction inline, on the thread that called StartWrite (its completion can be
// delivered before StartWrite returns). The outbox therefore calls StartWrite / Finish with its
// lock held and, when OnWriteDone or OnDone arrives inline on that same thread, carries on under
// the lock it already holds instead of locking again (a thread-local marks "inside this outbox's
// Start call"). So Start* never races with itself, with Finish, or with the reactor's deletion.
//
// The outbox is shared (std::shared_ptr) between the reactor and producers; once the stream is
// closed, Push just returns false.
//
// Thread-safe.
#ifndef RINGMASTER_COMMON_STREAM_OUTBOX_H_
#define RINGMASTER_COMMON_STREAM_OUTBOX_H_

#include <deque>
#include <functional>
#include <limits>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/status.h"

namespace ringmaster {

template <typename Msg>
class StreamOutbox {
 public:
  // `start_write` starts a write of the given message on the stream; `finish` finishes the stream
  // (server side; pass nullptr on the client side, where Finish is never called).
  StreamOutbox(std::function<void(const Msg*)> start_write,
               std::function<void(const grpc::Status&)> finish)
      : start_write_(std::move(start_write)), finish_(std::move(finish)) {}

  // Queues `message`; false (dropped) once the stream is closed or finishing. With `last`, the
  // stream is finished with OK after this message is written.
  bool Push(Msg message, bool last = false) {
    return PushBounded(std::move(message), last, std::numeric_limits<size_t>::max(),
                       grpc::Status::OK);
  }

  // Push for a reader that may stall: once `max_pending` messages are queued (the one being
  // written included), the stream is finished with `cut` after them instead (what is already
  // queued is still written), so memory stays bounded; a `last` message is queued regardless.
  // False when not queued.
  bool PushBounded(Msg message, bool last, size_t max_pending,
                   const grpc::Status& cut) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Guard guard(this);
    if (closed_ || finishing_) return false;
    if (!last && queue_.size() >= max_pending) {
      finishing_ = true;
      finish_status_ = cut;
      if (!writing_) DoFinish(cut);
      return false;
    }
    queue_.push_back(std::move(message));
    finishing_ = last;
    finish_status_ = grpc::Status::OK;
    if (!writing_) {
      writing_ = true;
      StartFront();
    }
    return true;
  }

  // Call from the reactor's OnWriteDone.
  void WriteDone(bool ok) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Guard guard(this);
    if (closed_) return;
    queue_.pop_front();
    if (ok && !queue_.empty()) {
      StartFront();
      return;
    }
    writing_ = false;
    // Also after a failed write: a server stream must be finished for OnDone to come.
    if (finishing_ && !finished_) DoFinish(finish_status_);
  }

  // Finishes the stream once, after the writes already queued. A no-op when a message pushed
  // with `last` is queued (the stream finishes after it) or when already finished.
  void Finish(const grpc::Status& status) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Guard guard(this);
    if (closed_ || finished_ || finishing_) return;
    finishing_ = true;
    finish_status_ = status;
    if (!writing_) DoFinish(status);
  }

  // Call from the reactor's OnDone: nothing is started on the stream afterwards.
  void Close() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Guard guard(this);
    closed_ = true;
    queue_.clear();
  }

  size_t Pending() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Guard guard(const_cast<StreamOutbox*>(this));
    return queue_.size();
  }

 private:
  // Locks the outbox unless this thread is already inside one of its Start/Finish calls (an
  // inline reaction), in which case the lock is already held further up the stack.
  class Guard {
   public:
    explicit Guard(StreamOutbox* outbox) ABSL_NO_THREAD_SAFETY_ANALYSIS
        : outbox_(outbox),
          reentrant_(Inside() == outbox) {
      if (!reentrant_) outbox_->mu_.Lock();
    }
    ~Guard() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (!reentrant_) outbox_->mu_.Unlock();
    }

   private:
    StreamOutbox* outbox_;
    bool reentrant_;
  };

  static const StreamOutbox*& Inside() {
    static thread_local const StreamOutbox* inside = nullptr;
    return inside;
  }

  // Runs a gRPC call with the "inside" marker set, so inline reactions re-enter safely.
  template <typename F>
  void Call(F f) {
    const StreamOutbox* previous = Inside();
    Inside() = this;
    f();
    Inside() = previous;
  }

  void StartFront() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const Msg* front = &queue_.front();
    Call([&] { start_write_(front); });
  }

  void DoFinish(const grpc::Status& status) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    finished_ = true;
    if (finish_) Call([&] { finish_(status); });
  }

  const std::function<void(const Msg*)> start_write_;
  const std::function<void(const grpc::Status&)> finish_;
  absl::Mutex mu_;
  std::deque<Msg> queue_;
  bool writing_ = false;
  bool finishing_ = false;
  grpc::Status finish_status_;
  bool finished_ = false;
  bool closed_ = false;
};

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_STREAM_OUTBOX_H_
