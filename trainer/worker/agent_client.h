// A worker's side of the worker API (proto/ringmaster/v1/worker.proto): the agent's Unix socket,
// identified by RINGMASTER_JOB, RINGMASTER_GENERATION and RANK, proven by
// RINGMASTER_WORKER_TOKEN. It is the rendezvous store the
// communicators are built from, and where step reports, phases and the exit reason go.
//
// Thread-safe. Every call has a deadline; errors come back as the agent's status (UNAVAILABLE
// when the agent is gone, FAILED_PRECONDITION when this worker's generation is stale,
// PERMISSION_DENIED without the token it was launched with).
#ifndef RINGMASTER_TRAINER_WORKER_AGENT_CLIENT_H_
#define RINGMASTER_TRAINER_WORKER_AGENT_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/ringmaster/v1/worker.grpc.pb.h"
#include "trainer/comm/key_value_store.h"

namespace ringmaster::trainer {

// Reads an environment variable; nullopt when unset (injectable for tests).
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
// The process environment.
EnvLookup ProcessEnvironment();

class AgentClient final : public KeyValueStore {
 public:
  // The client for the agent the environment names; nullptr (no error) when
  // RINGMASTER_AGENT_SOCKET is unset, i.e. the worker runs standalone. INVALID_ARGUMENT naming
  // the variable when the identity is malformed.
  static absl::StatusOr<std::unique_ptr<AgentClient>> FromEnvironment(const EnvLookup& env);

  const v1::WorkerIdentity& identity() const { return identity_; }

  absl::Status ReportPhase(v1::ReportPhaseRequest request);
  absl::Status ReportStep(v1::ReportStepRequest request);
  // The exit this process is about to make and why; the reason is sent as one line of at most
  // kExitReasonBytes (common/one_line.h). For a failure, the job's events quote it.
  absl::Status ReportExit(int exit_code, const std::string& reason);
  absl::Status ReportCollectives(v1::ReportCollectivesRequest request);
  absl::Status ReportLinks(v1::ReportLinksRequest request);
  // A checkpoint this rank could not save; the error is sent as one line of at most
  // kExitReasonBytes (common/one_line.h).
  absl::Status ReportCheckpointFailure(v1::ReportCheckpointFailureRequest request);
  // Whether a link check was requested (ReportResponse.link_check_requested in a step or
  // collectives report's answer) since the last call.
  bool TakeLinkCheckRequest();

  // KeyValueStore: the job generation's rendezvous store.
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Wait(const std::string& key, absl::Duration timeout) override;

 private:
  using Stub = v1::WorkerService::Stub;
  template <typename Request, typename Response>
  using Rpc = grpc::Status (Stub::*)(grpc::ClientContext*, const Request&, Response*);
  static constexpr absl::Duration kRpcTimeout = absl::Seconds(10);

  AgentClient(std::unique_ptr<Stub> stub, v1::WorkerIdentity identity)
      : stub_(std::move(stub)), identity_(std::move(identity)) {}

  // Sends `request`, with this worker's identity, through `rpc` within `timeout`; an error is
  // the call's, prefixed with `name`.
  template <typename Request, typename Response>
  absl::Status Call(const char* name, Rpc<Request, Response> rpc, Request& request,
                    Response* response, absl::Duration timeout = kRpcTimeout);
  // Call of a report whose answer may request a link check (TakeLinkCheckRequest).
  template <typename Request>
  absl::Status Report(const char* name, Rpc<Request, v1::ReportResponse> rpc, Request& request);

  std::unique_ptr<Stub> stub_;
  const v1::WorkerIdentity identity_;
  std::atomic<bool> link_check_requested_{false};
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_WORKER_AGENT_CLIENT_H_
