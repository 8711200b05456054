#include "agent/coordinator_link.h"

#include <random>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/proto_edge.h"

namespace ringmaster::agent {
namespace {

constexpr size_t kMaxPending = 10000;

}  // namespace

CoordinatorLink::CoordinatorLink(std::shared_ptr<grpc::Channel> channel,
                                 RegisterFactory make_register, CommandHandler on_command,
                                 ResendFactory resend, std::string bearer_token)
    : stub_(v1::AgentService::NewStub(channel)),
      make_register_(std::move(make_register)),
      on_command_(std::move(on_command)),
      resend_(std::move(resend)),
      bearer_token_(std::move(bearer_token)) {}

CoordinatorLink::~CoordinatorLink() { Stop(); }

void CoordinatorLink::Start() {
  connection_thread_ = std::thread([this] { ConnectionLoop(); });
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
}

void CoordinatorLink::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  if (connection_thread_.joinable()) connection_thread_.join();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

bool CoordinatorLink::connected() const {
  absl::MutexLock lock(&mu_);
  return connected_;
}

int64_t CoordinatorLink::connections() const {
  absl::MutexLock lock(&mu_);
  return connections_;
}

bool CoordinatorLink::Write(const v1::AgentMessage& message) {
  // The stream is looked up under write_mu_: the connection loop destroys it only while holding
  // write_mu_, so it cannot be destroyed between the lookup and the write.
  absl::MutexLock write_lock(&write_mu_);
  Stream* stream;
  {
    absl::MutexLock lock(&mu_);
    if (!connected_ || stream_ == nullptr) return false;
    stream = stream_.get();
  }
  return WritePendingLocked(stream) && stream->Write(message);
}

bool CoordinatorLink::WritePendingLocked(Stream* stream) {
  for (;;) {
    std::deque<v1::AgentMessage> backlog;
    std::set<int64_t> resent;
    {
      absl::MutexLock lock(&mu_);
      if (pending_.empty()) return true;
      backlog.swap(pending_);
      resent = resent_;
    }
    for (; !backlog.empty(); backlog.pop_front()) {
      const v1::AgentMessage& m = backlog.front();
      if (m.has_rendezvous() && resent.count(m.rendezvous().request_id()) > 0) continue;
      if (!stream->Write(m)) {
        // The stream broke: what is left goes first on the next one (it may have arrived).
        absl::MutexLock lock(&mu_);
        pending_.insert(pending_.begin(), backlog.begin(), backlog.end());
        while (pending_.size() > kMaxPending) pending_.pop_front();
        return false;
      }
    }
  }
}

void CoordinatorLink::QueueLocked(const v1::AgentMessage& message) {
  if (pending_.size() >= kMaxPending) pending_.pop_front();
  pending_.push_back(message);
}

CoordinatorLink::Stream* CoordinatorLink::CurrentStream() {
  absl::MutexLock lock(&mu_);
  return stream_.get();
}

bool CoordinatorLink::Send(const v1::AgentMessage& message) {
  const bool droppable = message.has_step_summary() || message.has_heartbeat();
  {
    // Queued in the same critical section that finds the link down: the connection loop, which
    // sets connected_ under this lock too, then writes it before anything sent later.
    absl::MutexLock lock(&mu_);
    if (!connected_) {
      if (droppable) return false;
      QueueLocked(message);
      return true;
    }
  }
  if (Write(message)) return true;
  if (droppable) return false;
  // The stream broke meanwhile. Should the link be up again already, the next write (a heartbeat
  // at the latest) sends the queue first.
  absl::MutexLock lock(&mu_);
  QueueLocked(message);
  return true;
}

void CoordinatorLink::ConnectionLoop() {
  std::mt19937 rng(std::random_device{}());
  absl::Duration backoff = absl::Milliseconds(100);
  for (;;) {
    grpc::ClientContext context;
    if (!bearer_token_.empty()) context.AddMetadata("authorization", "Bearer " + bearer_token_);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      context_ = &context;  // Stop() cancels it, also while Connect below waits
    }
    // Not under mu_: Connect waits until the call is under way, up to gRPC's connect timeout
    // (20 s) on a coordinator that accepts the connection but does not answer (paused), and
    // senders, the metrics and Stop() take mu_ meanwhile.
    std::unique_ptr<Stream> connecting = stub_->Connect(&context);
    {
      absl::MutexLock lock(&mu_);
      stream_ = std::move(connecting);
    }
    v1::AgentMessage hello;
    *hello.mutable_register_() = make_register_();
    v1::CoordinatorMessage message;
    bool registered = false;
    {
      absl::MutexLock write_lock(&write_mu_);
      Stream* stream = CurrentStream();
      registered = stream->Write(hello) && stream->Read(&message) && message.has_register_ack();
    }
    // Rendezvous requests the resend factory sends again; queued copies of them are skipped.
    std::set<int64_t> resent;
    if (registered && resend_ != nullptr) {
      const std::vector<v1::AgentMessage> again = resend_();
      for (const v1::AgentMessage& m : again) {
        if (m.has_rendezvous() && m.rendezvous().request_id() > 0) {
          resent.insert(m.rendezvous().request_id());
        }
      }
      absl::MutexLock write_lock(&write_mu_);
      Stream* stream = CurrentStream();
      for (const v1::AgentMessage& m : again) {
        if (!stream->Write(m)) {
          registered = false;
          break;
        }
      }
    }
    if (registered) {
      // From connected_ on, senders write (after the queue, which is written first, here) instead
      // of queueing: the queue cannot grow while this holds write_mu_.
      absl::MutexLock write_lock(&write_mu_);
      Stream* stream;
      {
        absl::MutexLock lock(&mu_);
        heartbeat_interval_ =
            absl::Seconds(std::max(0.05, message.register_ack().heartbeat_interval_seconds()));
        resent_ = std::move(resent);
        connected_ = true;
        ++connections_;
        stream = stream_.get();
      }
      registered = WritePendingLocked(stream);
    }
    if (registered) {
      RM_LOG(INFO) << "connected to the coordinator";
      Stream* stream = CurrentStream();
      while (stream->Read(&message)) {
        // Unknown fields are dropped before anything keeps or passes on the command.
        SanitizeIncoming(&message);
        on_command_(message);
      }
    }
    {
      absl::MutexLock lock(&mu_);
      connected_ = false;
    }
    // A read fails when the call is over (the coordinator ended it, the connection broke: then
    // Finish() says why at once), but also when a message arrived that this agent cannot parse
    // (malformed, or nested deeper than protobuf's limit of 100): then the call is still open,
    // and Finish() would wait for the coordinator forever. A call that Finish() has not closed
    // within kOpenCallGrace is cancelled (also releasing a writer blocked in Write(), which holds
    // the write lock Finish() waits for). Not at once: cancelling a call whose transport just
    // failed replaces the reason (say "keepalive watchdog timeout") with CANCELLED. A
    // registration that failed may have left the call open too (an answer that was not the
    // acknowledgement): that one is cancelled at once.
    constexpr absl::Duration kOpenCallGrace = absl::Seconds(1);
    absl::Notification finished;
    bool cancelled_open_call = false;  // Written by `canceller`, read after it is joined.
    std::thread canceller;
    if (!registered) {
      context.TryCancel();
    } else {
      canceller = std::thread([&] {
        if (!finished.WaitForNotificationWithTimeout(kOpenCallGrace)) {
          cancelled_open_call = true;
          context.TryCancel();
        }
      });
    }
    absl::Status ended;
    {
      // Wait for any writer to leave the stream before it is destroyed.
      absl::MutexLock write_lock(&write_mu_);
      ended = FromGrpcStatus(CurrentStream()->Finish());
      finished.Notify();
      absl::MutexLock lock(&mu_);
      context_ = nullptr;
      stream_.reset();
    }
    if (canceller.joinable()) canceller.join();
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    // The call was open after its last read: a message the agent could not read. The backoff is
    // not reset then (a coordinator that sends it again on the next stream is not asked again at
    // once).
    const bool unreadable = cancelled_open_call;
    if (registered && !unreadable) backoff = absl::Milliseconds(100);
    RM_LOG(WARNING) << "coordinator stream "
                    << (unreadable ? "cancelled: a message from the coordinator could not be "
                                     "parsed (malformed, or nested too deeply)"
                        : registered ? (ended.ok() ? "ended by the coordinator" : "broke")
                                     : "not established")
                    << " (" << ended << ")"
                    << "; retrying in about " << backoff;
    std::uniform_real_distribution<double> jitter(0.8, 1.2);
    absl::Duration wait = backoff * jitter(rng);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), wait);
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

void CoordinatorLink::HeartbeatLoop() {
  int64_t sequence = 0;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), heartbeat_interval_)) return;
      if (!connected_) continue;
    }
    v1::AgentMessage beat;
    beat.mutable_heartbeat()->set_sequence(++sequence);
    beat.mutable_heartbeat()->set_sent_unix_nanos(absl::ToUnixNanos(absl::Now()));
    Write(beat);
  }
}

}  // namespace ringmaster::agent
