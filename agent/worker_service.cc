#include "agent/worker_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "agent/report_validation.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/one_line.h"
#include "common/status.h"

namespace ringmaster::agent {
namespace {

constexpr absl::Duration kDefaultRendezvousTimeout = absl::Seconds(60);
// The longest wait a worker may ask for: each one holds one of the worker API's threads.
constexpr absl::Duration kMaxRendezvousTimeout = absl::Hours(1);

absl::Time Deadline(const grpc::ServerContext* context, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  absl::Time rpc = absl::FromChrono(context->deadline());
  return std::min(deadline, rpc);
}

}  // namespace

absl::Status WorkerService::Check(const v1::WorkerIdentity& worker) const {
  absl::Status status =
      agent_->CheckWorker(worker.job_id(), worker.generation(), worker.rank(), worker.token());
  if (status.ok()) return status;
  // Any local process can call: only a worker of the job (its token) learns why its identity was
  // refused (a stale generation, say). Anyone else learns nothing of the node's jobs,
  // generations or ranks; the agent's log has the detail.
  if (!absl::IsPermissionDenied(status) && agent_->HoldsTokenOf(worker.job_id(), worker.token())) {
    return status;
  }
  const int64_t refused = refused_.fetch_add(1) + 1;
  if (refused <= kRefusalsLoggedInFull || refused % kRefusalsLoggedInFull == 0) {
    RM_LOG(WARNING) << "worker API: refused a call (" << refused << " so far): " << status;
  }
  return absl::PermissionDeniedError(
      worker.token().empty()
          ? "worker.token: missing (is RINGMASTER_WORKER_TOKEN missing from the worker's "
            "environment, or is its client older than the agent?)"
          : "worker.token: not the RINGMASTER_WORKER_TOKEN of a worker running on this node for "
            "this identity");
}

bool WorkerService::TakeLinkCheckRequest(const v1::WorkerIdentity& worker) {
  return agent_->TakeLinkCheckRequest(worker.job_id(), worker.generation(), worker.rank());
}

absl::StatusOr<std::string> WorkerService::Proxy(const v1::WorkerIdentity& worker,
                                                 v1::RendezvousRequest request,
                                                 absl::Time deadline) {
  absl::Status ok = Check(worker);
  if (!ok.ok()) return ok;
  request.mutable_job()->set_job_id(worker.job_id());
  request.mutable_job()->set_generation(worker.generation());
  request.set_rank(worker.rank());
  request.set_deadline_unix_nanos(absl::ToUnixNanos(deadline));
  return agent_->Rendezvous(std::move(request), deadline);
}

grpc::Status WorkerService::RendezvousSet(grpc::ServerContext* context,
                                          const v1::RendezvousSetRequest* request,
                                          v1::RendezvousSetResponse* response) {
  v1::RendezvousRequest r;
  r.set_key(request->key());
  r.set_set_value(request->value());
  return ToGrpcStatus(
      Proxy(request->worker(), r, Deadline(context, kDefaultRendezvousTimeout)).status());
}

grpc::Status WorkerService::RendezvousGet(grpc::ServerContext* context,
                                          const v1::RendezvousGetRequest* request,
                                          v1::RendezvousGetResponse* response) {
  v1::RendezvousRequest r;
  r.set_key(request->key());
  r.set_get(true);
  auto value = Proxy(request->worker(), r, Deadline(context, kDefaultRendezvousTimeout));
  if (value.ok()) response->set_value(*value);
  return ToGrpcStatus(value.status());
}

grpc::Status WorkerService::RendezvousWait(grpc::ServerContext* context,
                                           const v1::RendezvousWaitRequest* request,
                                           v1::RendezvousGetResponse* response) {
  v1::RendezvousRequest r;
  r.set_key(request->key());
  r.set_wait(true);
  absl::Duration timeout =
      request->timeout_seconds() > 0
          ? std::min(absl::Seconds(request->timeout_seconds()), kMaxRendezvousTimeout)
          : kDefaultRendezvousTimeout;
  auto value = Proxy(request->worker(), r, Deadline(context, timeout));
  if (value.ok()) response->set_value(*value);
  return ToGrpcStatus(value.status());
}

absl::Status WorkerService::Step(const v1::ReportStepRequest& request,
                                 v1::ReportResponse* response) {
  RETURN_IF_ERROR(Check(request.worker()));
  RETURN_IF_ERROR(ValidateStepReport(request));
  metrics_->OnStep(request);
  watchdog_->Report(request.worker().job_id(), request.worker().generation(),
                    request.worker().rank(), v1::WORKER_PHASE_STEP, request.step_seconds());
  if (response != nullptr) {
    response->set_link_check_requested(TakeLinkCheckRequest(request.worker()));
  }
  return absl::OkStatus();
}

absl::Status WorkerService::Phase(const v1::ReportPhaseRequest& request) {
  RETURN_IF_ERROR(Check(request.worker()));
  RETURN_IF_ERROR(ValidatePhaseReport(request));
  metrics_->OnPhase(request);
  watchdog_->Report(request.worker().job_id(), request.worker().generation(),
                    request.worker().rank(), request.phase(), 0);
  return absl::OkStatus();
}

absl::Status WorkerService::Exit(const v1::ReportExitRequest& request) {
  RETURN_IF_ERROR(Check(request.worker()));
  // Kept and logged as the one line of at most kExitReasonBytes the exit reports anyway: a
  // worker's message could be megabytes, or forge log lines with its newlines.
  const std::string reason = OneLine(request.reason(), kExitReasonBytes);
  RM_LOG(INFO) << "rank " << request.worker().rank() << " of " << request.worker().job_id()
               << " is exiting with code " << request.exit_code() << ": " << reason;
  agent_->NoteExitAnnounced(request.worker().job_id(), request.worker().generation(),
                            request.worker().rank(), request.exit_code(), reason);
  return absl::OkStatus();
}

absl::Status WorkerService::Collectives(const v1::ReportCollectivesRequest& request,
                                        v1::ReportResponse* response) {
  RETURN_IF_ERROR(Check(request.worker()));
  RETURN_IF_ERROR(ValidateCollectivesReport(request));
  metrics_->OnCollectives(request);
  watchdog_->Collectives(request);
  if (response != nullptr) {
    response->set_link_check_requested(TakeLinkCheckRequest(request.worker()));
  }
  return absl::OkStatus();
}

absl::Status WorkerService::CheckpointFailure(const v1::ReportCheckpointFailureRequest& request) {
  RETURN_IF_ERROR(Check(request.worker()));
  if (request.step() < 1) {
    return FieldError("step", absl::StrCat("must be >= 1, got ", request.step()));
  }
  if (request.consecutive_failures() < 1) {
    return FieldError("consecutive_failures",
                      absl::StrCat("must be >= 1, got ", request.consecutive_failures()));
  }
  v1::CheckpointFailure failure;
  failure.mutable_job()->set_job_id(request.worker().job_id());
  failure.mutable_job()->set_generation(request.worker().generation());
  failure.set_rank(request.worker().rank());
  failure.set_step(request.step());
  // One bounded line: the coordinator stores it in the job's events.
  failure.set_error(OneLine(request.error(), kExitReasonBytes));
  failure.set_consecutive_failures(request.consecutive_failures());
  // Not logged here: the rank's log has it, and the coordinator's events (throttled).
  agent_->ForwardCheckpointFailure(failure);
  return absl::OkStatus();
}

absl::Status WorkerService::HandleReport(const v1::WorkerReport& report) {
  switch (report.report_case()) {
    case v1::WorkerReport::kStep:
      return Step(report.step(), nullptr);
    case v1::WorkerReport::kPhase:
      return Phase(report.phase());
    case v1::WorkerReport::kExit:
      return Exit(report.exit());
    case v1::WorkerReport::kCollectives:
      return Collectives(report.collectives(), nullptr);
    case v1::WorkerReport::kCheckpointFailure:
      return CheckpointFailure(report.checkpoint_failure());
    case v1::WorkerReport::kSteps: {
      if (report.steps().steps().empty()) {
        return FieldError("steps.steps", "must hold at least one step report");
      }
      // Each in order, as its own report; the first refusal is the datagram's (counted once),
      // and the steps after it are still taken.
      absl::Status first = absl::OkStatus();
      for (const v1::ReportStepRequest& step : report.steps().steps()) {
        absl::Status status = Step(step, nullptr);
        if (first.ok()) first = std::move(status);
      }
      return first;
    }
    case v1::WorkerReport::REPORT_NOT_SET:
      break;
  }
  return FieldError("report",
                    "must carry one of step, steps, phase, exit, collectives, checkpointFailure");
}

grpc::Status WorkerService::ReportStep(grpc::ServerContext* context,
                                       const v1::ReportStepRequest* request,
                                       v1::ReportResponse* response) {
  return ToGrpcStatus(Step(*request, response));
}

grpc::Status WorkerService::ReportPhase(grpc::ServerContext* context,
                                        const v1::ReportPhaseRequest* request,
                                        v1::ReportResponse* response) {
  return ToGrpcStatus(Phase(*request));
}

grpc::Status WorkerService::ReportExit(grpc::ServerContext* context,
                                       const v1::ReportExitRequest* request,
                                       v1::ReportResponse* response) {
  return ToGrpcStatus(Exit(*request));
}

grpc::Status WorkerService::ReportCollectives(grpc::ServerContext* context,
                                              const v1::ReportCollectivesRequest* request,
                                              v1::ReportResponse* response) {
  return ToGrpcStatus(Collectives(*request, response));
}

grpc::Status WorkerService::ReportLinks(grpc::ServerContext* context,
                                        const v1::ReportLinksRequest* request,
                                        v1::ReportResponse* response) {
  absl::Status ok = Check(request->worker());
  if (ok.ok()) ok = ValidateLinksReport(*request);
  if (!ok.ok()) return ToGrpcStatus(ok);
  v1::LinkReport report;
  report.mutable_job()->set_job_id(request->worker().job_id());
  report.mutable_job()->set_generation(request->worker().generation());
  report.set_rank(request->worker().rank());
  *report.mutable_links() = request->links();
  report.set_seconds(request->seconds());
  report.set_step(request->step());
  agent_->ForwardLinkReport(report);
  return grpc::Status::OK;
}

grpc::Status WorkerService::ReportCheckpointFailure(
    grpc::ServerContext* context, const v1::ReportCheckpointFailureRequest* request,
    v1::ReportResponse* response) {
  return ToGrpcStatus(CheckpointFailure(*request));
}

}  // namespace ringmaster::agent
