// A write queue for a gRPC callback-API server stream: messages can be queued from any thread at
// any time; they are written one at a time, in order (the callback API allows one write in
// flight). Start* and Finish are called with the outbox's lock held (gRPC runs reactions on its
// own threads, never inside Start*), which keeps them from racing with each other. Shared (std::shared_ptr) between the reactor and whoever produces messages, so a
// producer that outlives the stream simply has its messages dropped.
//
// Thread-safe.
#ifndef RINGMASTER_COORDINATOR_STREAM_OUTBOX_H_
#define RINGMASTER_COORDINATOR_STREAM_OUTBOX_H_

#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/status.h"

namespace ringmaster::coordinator {

// `Reactor` is a grpc::ServerWriteReactor<Msg> or grpc::ServerBidiReactor<In, Msg>.
template <typename Reactor, typename Msg>
class StreamOutbox {
 public:
  explicit StreamOutbox(Reactor* reactor) : reactor_(reactor) {}

  // Queues `message`; returns false (dropping it) once the stream is closed. With `last`, the
  // stream is finished with OK after this message is written and later Push calls are dropped.
  bool Push(Msg message, bool last = false) {
    absl::MutexLock lock(&mu_);
    if (reactor_ == nullptr || finishing_) return false;
    queue_.push_back(std::move(message));
    finishing_ = last;
    if (!writing_) {
      writing_ = true;
      reactor_->StartWrite(&queue_.front());
    }
    return true;
  }

  // Call from the reactor's OnWriteDone. Returns false if the write failed (stream broken).
  void WriteDone(bool ok) {
    absl::MutexLock lock(&mu_);
    if (reactor_ == nullptr) return;
    queue_.pop_front();
    if (!ok) {
      writing_ = false;
      return;  // The stream is broken; OnDone follows.
    }
    if (!queue_.empty()) {
      reactor_->StartWrite(&queue_.front());
    } else {
      writing_ = false;
      if (finishing_ && !finished_) {
        finished_ = true;
        reactor_->Finish(grpc::Status::OK);
      }
    }
  }

  // Finishes the stream once (later calls and later Push calls do nothing). A no-op when a
  // message pushed with `last` is queued: the stream finishes with OK after writing it.
  void Finish(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    if (reactor_ == nullptr || finished_ || finishing_) return;
    finished_ = true;
    finishing_ = true;
    reactor_->Finish(status);
  }

  // Call from the reactor's OnDone: no further writes.
  void Close() {
    absl::MutexLock lock(&mu_);
    reactor_ = nullptr;
    queue_.clear();
  }

  size_t Pending() const {
    absl::MutexLock lock(&mu_);
    return queue_.size();
  }

 private:
  mutable absl::Mutex mu_;
  Reactor* reactor_ ABSL_GUARDED_BY(mu_);
  std::deque<Msg> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_STREAM_OUTBOX_H_
