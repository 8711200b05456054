// The worker API (proto/ringmaster/v1/worker.proto), served by the agent on a Unix socket.
// Every call's identity (job, generation, rank) must be a worker running on this node now, and
// carry the token that rank was launched with (WorkerIdentity.token). Any local process can
// connect, so a refusal says nothing of the node's jobs: a caller that does not hold the token
// of a worker of the job it names gets PERMISSION_DENIED "worker.token: ..." without the job id,
// generation or rank (the agent logs the detail); one that does (a worker of an older generation,
// say) gets FAILED_PRECONDITION with the reason ("stale generation ...").
//
// The reports also arrive as datagrams (v1::WorkerReport, report_socket.h): HandleReport runs the
// same handlers as the gRPC calls, with the same checks, and returns their status instead of
// answering (a datagram has no reply).
//
// Synchronous gRPC service: a node runs a handful of workers, and a rendezvous wait holds one
// server thread while it is proxied to the coordinator. Thread-safe: the gRPC threads and the
// report socket's reader call it concurrently.
#ifndef RINGMASTER_AGENT_WORKER_SERVICE_H_
#define RINGMASTER_AGENT_WORKER_SERVICE_H_

#include <atomic>

#include "agent/local_watchdog.h"
#include "agent/node_agent.h"
#include "agent/rank_metrics.h"
#include "proto/ringmaster/v1/worker.grpc.pb.h"

namespace ringmaster::agent {

class WorkerService final : public v1::WorkerService::Service {
 public:
  // Pointers must outlive the service.
  WorkerService(NodeAgent* agent, RankMetrics* metrics, LocalWatchdog* watchdog)
      : agent_(agent), metrics_(metrics), watchdog_(watchdog) {}

  grpc::Status RendezvousSet(grpc::ServerContext* context, const v1::RendezvousSetRequest* request,
                             v1::RendezvousSetResponse* response) override;
  grpc::Status RendezvousGet(grpc::ServerContext* context, const v1::RendezvousGetRequest* request,
                             v1::RendezvousGetResponse* response) override;
  grpc::Status RendezvousWait(grpc::ServerContext* context,
                              const v1::RendezvousWaitRequest* request,
                              v1::RendezvousGetResponse* response) override;
  grpc::Status ReportStep(grpc::ServerContext* context, const v1::ReportStepRequest* request,
                          v1::ReportResponse* response) override;
  grpc::Status ReportPhase(grpc::ServerContext* context, const v1::ReportPhaseRequest* request,
                           v1::ReportResponse* response) override;
  grpc::Status ReportExit(grpc::ServerContext* context, const v1::ReportExitRequest* request,
                          v1::ReportResponse* response) override;
  // Sequence numbers: recorded for the summaries, never a sign of life for the watchdog; before
  // a command rank's first step, a wait in a collective that does not move is judged
  // (local_watchdog.h).
  grpc::Status ReportCollectives(grpc::ServerContext* context,
                                 const v1::ReportCollectivesRequest* request,
                                 v1::ReportResponse* response) override;
  // Forwarded to the coordinator, which judges the job's links once every rank reported.
  grpc::Status ReportLinks(grpc::ServerContext* context, const v1::ReportLinksRequest* request,
                           v1::ReportResponse* response) override;
  // Forwarded to the coordinator (an event and a counter there). INVALID_ARGUMENT for a step or
  // count below 1; the error is cut to one line of at most kExitReasonBytes.
  grpc::Status ReportCheckpointFailure(grpc::ServerContext* context,
                                       const v1::ReportCheckpointFailureRequest* request,
                                       v1::ReportResponse* response) override;

  // One report that came as a datagram: the handler of the call it carries, as that call would
  // run it (PERMISSION_DENIED / FAILED_PRECONDITION for the identity, INVALID_ARGUMENT naming the
  // field for the report's form; "report: ..." for a WorkerReport that carries none). A link
  // check requested through the worker is not handed out here (nobody would read the answer): its
  // next ReportStep or ReportCollectives call gets it.
  absl::Status HandleReport(const v1::WorkerReport& report);

 private:
  // The reports' handlers, shared by the gRPC calls and HandleReport. `response` may be null (a
  // datagram): then no link check request is taken.
  absl::Status Step(const v1::ReportStepRequest& request, v1::ReportResponse* response);
  absl::Status Phase(const v1::ReportPhaseRequest& request);
  absl::Status Exit(const v1::ReportExitRequest& request);
  absl::Status Collectives(const v1::ReportCollectivesRequest& request,
                           v1::ReportResponse* response);
  absl::Status CheckpointFailure(const v1::ReportCheckpointFailureRequest& request);

  absl::Status Check(const v1::WorkerIdentity& worker) const;
  // A link check requested through this worker and not handed out yet (answered in its next
  // ReportStep or ReportCollectives response).
  bool TakeLinkCheckRequest(const v1::WorkerIdentity& worker);
  // Proxies `request` (key and op set) for `worker` with `deadline`.
  absl::StatusOr<std::string> Proxy(const v1::WorkerIdentity& worker, v1::RendezvousRequest request,
                                    absl::Time deadline);

  // Refusals logged in full: the first ones, then one in this many.
  static constexpr int64_t kRefusalsLoggedInFull = 100;

  NodeAgent* const agent_;
  RankMetrics* const metrics_;
  LocalWatchdog* const watchdog_;
  mutable std::atomic<int64_t> refused_{0};
};

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_WORKER_SERVICE_H_
