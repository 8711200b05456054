// The agent's single stream to the coordinator (AgentService.Connect), kept up across
// coordinator restarts and network trouble.
//
// A connection thread connects, sends Register (built fresh each time by `make_register`, so it
// lists the workers still running), waits for RegisterAck, writes what `resend` returns (before
// anything else: what a coordinator that restarted must hear again, see rendezvous_replay.h),
// then reads commands and hands them to `on_command` (on the connection thread, in order, unknown
// fields dropped). When the stream breaks, or a message arrives that the agent cannot parse (the
// stream is cancelled a second after it, if still open), it reconnects with exponential backoff
// (100 ms doubling to 5 s, with jitter; reset by a stream that was established and did not end
// on such a message). A heartbeat thread sends Heartbeat at the interval the coordinator asked
// for while connected.
//
// While disconnected, Send() keeps worker states, link reports and rendezvous requests in a
// bounded queue (oldest dropped past 10,000) and delivers them after the next RegisterAck and
// what `resend` returned, before anything sent later (each sender's messages keep their order);
// step summaries are dropped (the next summary supersedes them). A queued
// rendezvous request that `resend` returned too (same request id; rendezvous_replay.h re-sends
// every one still unanswered) is not sent twice; one made after `resend` ran is still delivered.
// Workers keep running meanwhile.
//
// Thread-safe.
#ifndef RINGMASTER_AGENT_COORDINATOR_LINK_H_
#define RINGMASTER_AGENT_COORDINATOR_LINK_H_

#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "proto/ringmaster/v1/agent.grpc.pb.h"

namespace ringmaster::agent {

class CoordinatorLink {
 public:
  using RegisterFactory = std::function<v1::Register()>;
  using CommandHandler = std::function<void(const v1::CoordinatorMessage&)>;
  using ResendFactory = std::function<std::vector<v1::AgentMessage>()>;

  // `resend` may be null. The factories are called on the connection thread, without the link's
  // locks held. A non-empty `bearer_token` is sent on every stream as `authorization: Bearer
  // TOKEN` (the coordinator's agent token, docs/security.md).
  CoordinatorLink(std::shared_ptr<grpc::Channel> channel, RegisterFactory make_register,
                  CommandHandler on_command, ResendFactory resend = nullptr,
                  std::string bearer_token = "");
  ~CoordinatorLink();  // Stop()s.

  // Starts the connection and heartbeat threads.
  void Start();
  // Closes the stream and joins the threads.
  void Stop();

  // Sends (or queues, see above) a message. Returns false if it was dropped.
  bool Send(const v1::AgentMessage& message);

  bool connected() const;
  // Times the stream was (re)established.
  int64_t connections() const;

 private:
  using Stream = grpc::ClientReaderWriter<v1::AgentMessage, v1::CoordinatorMessage>;

  void ConnectionLoop();
  // The stream of the connection being made or up; only the connection thread replaces it.
  Stream* CurrentStream() ABSL_LOCKS_EXCLUDED(mu_);
  void HeartbeatLoop();
  // Writes under the write lock, after whatever is queued; false if not connected or the stream
  // is broken.
  bool Write(const v1::AgentMessage& message) ABSL_LOCKS_EXCLUDED(mu_, write_mu_);
  // Writes the queue to `stream`, oldest first, skipping rendezvous requests in resent_. False if
  // the stream broke; the unwritten rest is queued again, first.
  bool WritePendingLocked(Stream* stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_)
      ABSL_LOCKS_EXCLUDED(mu_);
  void QueueLocked(const v1::AgentMessage& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<v1::AgentService::Stub> stub_;
  const RegisterFactory make_register_;
  const CommandHandler on_command_;
  const ResendFactory resend_;
  const std::string bearer_token_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  int64_t connections_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  std::deque<v1::AgentMessage> pending_ ABSL_GUARDED_BY(mu_);
  // The rendezvous request ids `resend` returned on the current stream: queued copies are skipped.
  std::set<int64_t> resent_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::unique_ptr<Stream> stream_ ABSL_GUARDED_BY(mu_);

  // Held while writing to the stream, and by the connection thread while it registers and while
  // it destroys a stream; taken before mu_.
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::thread connection_thread_;
  std::thread heartbeat_thread_;
};

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_COORDINATOR_LINK_H_
