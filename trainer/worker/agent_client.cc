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
namespace {

constexpr absl::Duration kRpcTimeout = absl::Seconds(10);

absl::Status FromGrpc(const char* rpc, const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(rpc, ": ", status.error_message()));
}

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

}  // namespace

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
  *request.mutable_worker() = identity_;
  v1::ReportResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, kRpcTimeout);
  return FromGrpc("ReportPhase", stub_->ReportPhase(&context, request, &response));
}

absl::Status AgentClient::ReportStep(v1::ReportStepRequest request) {
  *request.mutable_worker() = identity_;
  v1::ReportResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, kRpcTimeout);
  absl::Status s = FromGrpc("ReportStep", stub_->ReportStep(&context, request, &response));
  if (s.ok() && response.link_check_requested()) link_check_requested_.store(true);
  return s;
}

absl::Status AgentClient::ReportExit(int exit_code, const std::string& reason) {
  v1::ReportExitRequest request;
  *request.mutable_worker() = identity_;
  request.set_exit_code(exit_code);
  // A proto string must be valid UTF-8 (a Status message may quote anything): the agent would
  // refuse the call, and the reason would be lost.
  request.set_reason(OneLine(reason, kExitReasonBytes));
  v1::ReportResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, kRpcTimeout);
  return FromGrpc("ReportExit", stub_->ReportExit(&context, request, &response));
}

absl::Status AgentClient::ReportCollectives(v1::ReportCollectivesRequest request) {
  *request.mutable_worker() = identity_;
  v1::ReportResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, kRpcTimeout);
  absl::Status s =
      FromGrpc("ReportCollectives", stub_->ReportCollectives(&context, request, &response));
  if (s.ok() && response.link_check_requested()) link_check_requested_.store(true);
  return s;
}

bool AgentClient::TakeLinkCheckRequest() { return link_check_requested_.exchange(false); }

absl::Status AgentClient::ReportLinks(v1::ReportLinksRequest request) {
  *request.mutable_worker() = identity_;
  v1::ReportResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, kRpcTimeout);
  return FromGrpc("ReportLinks", stub_->ReportLinks(&context, request, &response));
}

absl::Status AgentClient::ReportCheckpointFailure(v1::ReportCheckpointFailureRequest request) {
  *request.mutable_worker() = identity_;
  // Valid UTF-8 on one bounded line, as the agent requires (an error may quote a path).
  request.set_error(OneLine(request.error(), kExitReasonBytes));
  v1::ReportResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, kRpcTimeout);
  return FromGrpc("ReportCheckpointFailure",
                  stub_->ReportCheckpointFailure(&context, request, &response));
}

absl::Status AgentClient::Set(const std::string& key, const std::string& value) {
  v1::RendezvousSetRequest request;
  *request.mutable_worker() = identity_;
  request.set_key(key);
  request.set_value(value);
  v1::RendezvousSetResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, kRpcTimeout);
  return FromGrpc("RendezvousSet", stub_->RendezvousSet(&context, request, &response));
}

absl::StatusOr<std::string> AgentClient::Wait(const std::string& key, absl::Duration timeout) {
  v1::RendezvousWaitRequest request;
  *request.mutable_worker() = identity_;
  request.set_key(key);
  request.set_timeout_seconds(absl::ToDoubleSeconds(timeout));
  v1::RendezvousGetResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, timeout + kRpcTimeout);
  RETURN_IF_ERROR(FromGrpc("RendezvousWait", stub_->RendezvousWait(&context, request, &response)));
  return response.value();
}

}  // namespace ringmaster::trainer
