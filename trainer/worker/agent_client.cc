#include "trainer/worker/agent_client.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_client.h"
#include "common/one_line.h"
#include "common/status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/credentials.h"

namespace ringmaster::trainer {

EnvLookup ProcessEnvironment() {
  return [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

absl::StatusOr<std::unique_ptr<AgentClient>> AgentClient::FromEnvironment(const EnvLookup& env) {
  std::optional<std::string> socket = env("RINGMASTER_AGENT_SOCKET");
  if (!socket.has_value() || socket->empty()) return nullptr;
  if (!absl::StartsWith(*socket, "unix:")) socket = "unix:" + *socket;
  v1::WorkerIdentity identity;
  identity.set_job_id(env("RINGMASTER_JOB").value_or(""));
  if (identity.job_id().empty()) return FieldError("RINGMASTER_JOB", "must be set");
  int64_t generation = 0;
  int rank = 0;
  if (!absl::SimpleAtoi(env("RINGMASTER_GENERATION").value_or(""), &generation)) {
    return FieldError("RINGMASTER_GENERATION", "must be an integer");
  }
  if (!absl::SimpleAtoi(env("RANK").value_or(""), &rank)) {
    return FieldError("RANK", "must be an integer");
  }
  identity.set_generation(generation);
  identity.set_rank(rank);
  identity.set_token(env("RINGMASTER_WORKER_TOKEN").value_or(""));
  auto channel = MakeChannel(*socket, grpc::InsecureChannelCredentials());
  return std::unique_ptr<AgentClient>(
      new AgentClient(v1::WorkerService::NewStub(channel), std::move(identity)));
}

absl::Status AgentClient::ReportPhase(v1::ReportPhaseRequest request) {
  v1::ReportResponse response;
  return Call("ReportPhase", &Stub::ReportPhase, request, &response);
}

absl::Status AgentClient::ReportStep(v1::ReportStepRequest request) {
  return Report("ReportStep", &Stub::ReportStep, request);
}

absl::Status AgentClient::ReportExit(int exit_code, const std::string& reason) {
  v1::ReportExitRequest request;
  request.set_exit_code(exit_code);
  // A proto string must be valid UTF-8 (a Status message may quote anything): the agent would
  // refuse the call, and the reason would be lost.
  request.set_reason(OneLine(reason, kExitReasonBytes));
  v1::ReportResponse response;
  return Call("ReportExit", &Stub::ReportExit, request, &response);
}

absl::Status AgentClient::ReportCollectives(v1::ReportCollectivesRequest request) {
  return Report("ReportCollectives", &Stub::ReportCollectives, request);
}

bool AgentClient::TakeLinkCheckRequest() { return link_check_requested_.exchange(false); }

absl::Status AgentClient::ReportLinks(v1::ReportLinksRequest request) {
  v1::ReportResponse response;
  return Call("ReportLinks", &Stub::ReportLinks, request, &response);
}

absl::Status AgentClient::ReportCheckpointFailure(v1::ReportCheckpointFailureRequest request) {
  // Valid UTF-8 on one bounded line, as the agent requires (an error may quote a path).
  request.set_error(OneLine(request.error(), kExitReasonBytes));
  v1::ReportResponse response;
  return Call("ReportCheckpointFailure", &Stub::ReportCheckpointFailure, request, &response);
}

absl::Status AgentClient::Set(const std::string& key, const std::string& value) {
  v1::RendezvousSetRequest request;
  request.set_key(key);
  request.set_value(value);
  v1::RendezvousSetResponse response;
  return Call("RendezvousSet", &Stub::RendezvousSet, request, &response);
}

absl::StatusOr<std::string> AgentClient::Wait(const std::string& key, absl::Duration timeout) {
  v1::RendezvousWaitRequest request;
  request.set_key(key);
  request.set_timeout_seconds(absl::ToDoubleSeconds(timeout));
  v1::RendezvousGetResponse response;
  RETURN_IF_ERROR(
      Call("RendezvousWait", &Stub::RendezvousWait, request, &response, timeout + kRpcTimeout));
  return response.value();
}

template <typename Request, typename Response>
absl::Status AgentClient::Call(const char* name, Rpc<Request, Response> rpc, Request& request,
                               Response* response, absl::Duration timeout) {
  *request.mutable_worker() = identity_;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  const grpc::Status status = (stub_.get()->*rpc)(&context, request, response);
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(name, ": ", status.error_message()));
}

template <typename Request>
absl::Status AgentClient::Report(const char* name, Rpc<Request, v1::ReportResponse> rpc,
                                 Request& request) {
  v1::ReportResponse response;
  absl::Status s = Call(name, rpc, request, &response);
  if (s.ok() && response.link_check_requested()) link_check_requested_.store(true);
  return s;
}

}  // namespace ringmaster::trainer
