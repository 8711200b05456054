// AgentService: one bidirectional stream per agent (callback API: no thread per stream).
//
// Authentication (docs/security.md): when the tokens file has `agent` tokens (auth.h), a stream
// is refused before anything is read unless its `authorization: Bearer TOKEN` metadata is an
// agent's token: UNAUTHENTICATED without a known token, PERMISSION_DENIED for a user's or an
// admin's. A Register then needs the node name to be free or held by the same agent identity
// (node_identities.h): PERMISSION_DENIED otherwise, which ends only that stream and leaves the node
// it named alone. Without agent tokens (only allowed with --insecure) agents are not
// authenticated and node names are not bound.
//
// The first message must be Register; the answer is RegisterAck with the heartbeat interval and
// the lost-after interval. Then heartbeats go to the NodeManager (O(1), no disk) on the gRPC
// thread that read them; worker states and step summaries go to the JobManager and rendezvous
// requests to the RendezvousManager (waits hold no thread: the answer is queued on the stream
// when it comes) on the service's workers, each stream's in order, so that a message waiting for
// the job lock holds up no other stream's reading (its own stream's only once 64 wait). Commands
// from the job manager are queued on the node's current stream (AgentCommandSink). A stream
// that ends only marks its node lost (NodeManager::Disconnected): the coordinator's ticker tells
// the job manager.
//
// Thread-safe.
#ifndef RINGMASTER_COORDINATOR_AGENT_SERVICE_H_
#define RINGMASTER_COORDINATOR_AGENT_SERVICE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics/registry.h"
#include "common/stream_outbox.h"
#include "common/thread_pool.h"
#include "coordinator/agent_command_sink.h"
#include "coordinator/auth.h"
#include "coordinator/job_manager.h"
#include "coordinator/node_identities.h"
#include "coordinator/node_manager.h"
#include "coordinator/rendezvous_manager.h"
#include "proto/ringmaster/v1/agent.grpc.pb.h"

namespace ringmaster::coordinator {

class AgentService final : public v1::AgentService::CallbackService, public AgentCommandSink {
 public:
  using Outbox = StreamOutbox<v1::CoordinatorMessage>;

  // Pointers must outlive the service. `jobs` may be set later with set_jobs (the job manager
  // needs this service as its command sink), but before the server starts.
  // `registry` (may be null) receives ringmaster_agent_message_seconds{type}: the time the
  // coordinator spends handling each agent message (heartbeat, worker_state, ...).
  AgentService(NodeManager* nodes, RendezvousManager* rendezvous, Clock* clock,
               absl::Duration heartbeat_interval, absl::Duration lost_after,
               metrics::Registry* registry);
  void set_jobs(JobManager* jobs) { jobs_ = jobs; }
  // Authenticates agents with `auth`'s agent tokens and binds node names in `identities` (see
  // above). Both must outlive the service; call before the server starts. Not called (or null):
  // no authentication, no binding.
  void set_identity(const TokenAuthenticator* auth, NodeIdentities* identities) {
    auth_ = auth;
    identities_ = identities;
  }
  // The node name bindings (null if set_identity was not called): UpdateNode's release_identity.
  NodeIdentities* node_identities() const { return identities_; }

  grpc::ServerBidiReactor<v1::AgentMessage, v1::CoordinatorMessage>* Connect(
      grpc::CallbackServerContext* context) override;

  bool Send(const std::string& node, const v1::CoordinatorMessage& message) override;

  // Call when the coordinator begins to shut down, before its server cancels the streams: a stream
  // that ends from then on is the coordinator's doing, so its node is not lost and its jobs are
  // not restarted (the next coordinator adopts their workers when the agents reconnect).
  void BeginShutdown() { shutting_down_.store(true); }

  // Asks `node`'s agent for a chunk of a rank's log (request.request_id is assigned here) and
  // calls `done` with its answer, or with LogData.error set if the node has no stream or its
  // stream ends first. `done` runs on a gRPC thread or one of the service's workers and must not
  // block.
  void ReadLog(const std::string& node, v1::ReadLog request,
               std::function<void(const v1::LogData&)> done);

 private:
  class Stream;
  friend class Stream;

  // Threads handling agent messages other than heartbeats; most wait for the job lock in turn.
  static constexpr int kWorkers = 4;

  void Attach(const std::string& node, std::shared_ptr<Outbox> outbox);
  // `node`'s current stream, or null.
  std::shared_ptr<Outbox> StreamOf(const std::string& node);
  void Detach(const std::string& node, const Outbox* outbox);
  void OnLogData(const v1::LogData& data);
  // The caller of a new stream: an agent (its token's identity), or anonymous when agents are not
  // authenticated. UNAUTHENTICATED / PERMISSION_DENIED as described above.
  absl::StatusOr<Caller> AuthenticateAgent(grpc::CallbackServerContext* context) const;
  // Into ringmaster_agent_message_seconds{type}.
  void ObserveHandling(const v1::AgentMessage& message, absl::Duration took);
  // Into ringmaster_heartbeat_delay_seconds, when the agent said when it sent the heartbeat.
  void ObserveHeartbeatDelay(const v1::Heartbeat& heartbeat);
  // Fails every log read sent on `outbox`, `node`'s stream that ended (not those of a newer
  // stream of the same node, which can be attached before the older one's end is seen).
  void FailLogReads(const std::string& node, const Outbox* outbox);

  struct PendingLogRead {
    const Outbox* outbox;  // identifies the stream it was sent on
    std::function<void(const v1::LogData&)> done;
  };

  NodeManager* const nodes_;
  RendezvousManager* const rendezvous_;
  Clock* const clock_;
  JobManager* jobs_ = nullptr;
  const TokenAuthenticator* auth_ = nullptr;
  NodeIdentities* identities_ = nullptr;
  const absl::Duration heartbeat_interval_;
  const absl::Duration lost_after_;
  // Handling time by message type, indexed by AgentMessage::BodyCase.
  std::vector<std::shared_ptr<metrics::Histogram>> handling_seconds_;
  std::shared_ptr<metrics::Histogram> heartbeat_delay_;  // from queued by the agent to read

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Outbox>> streams_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, PendingLogRead> log_reads_ ABSL_GUARDED_BY(mu_);
  int64_t next_log_read_ ABSL_GUARDED_BY(mu_) = 1;
  // Owner ids of the streams' rendezvous waits (RendezvousManager::CancelOwner).
  std::atomic<uint64_t> next_stream_id_{1};
  std::atomic<bool> shutting_down_{false};

  // Handle the streams' messages (Stream::Drain). Last: joined before the rest goes.
  ThreadPool workers_{kWorkers};
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_AGENT_SERVICE_H_
