// JobService: the user-facing API. Thin: authenticates the caller, converts protos and Status at
// the boundary, hides other callers' secrets, and calls the JobManager. Unary calls finish inline
// on gRPC's callback threads; WatchJob is a server stream fed by the job manager without a thread
// per watcher.
#ifndef RINGMASTER_COORDINATOR_JOB_SERVICE_H_
#define RINGMASTER_COORDINATOR_JOB_SERVICE_H_

#include "common/metrics/registry.h"
#include "coordinator/agent_service.h"
#include "coordinator/auth.h"
#include "coordinator/job_manager.h"
#include "coordinator/node_manager.h"
#include "proto/ringmaster/v1/coordinator.grpc.pb.h"

namespace ringmaster::coordinator {

// What GetJob and ListJobs show in place of each environment value of a job the caller neither
// owns nor administers (the names stay); ReadLogs refuses such a caller.
inline constexpr char kHiddenEnvironmentValue[] =
    "(hidden: only the job's owner and admins see environment values)";

class JobService final : public v1::JobService::CallbackService {
 public:
  // Pointers must outlive the service.
  // `registry` (may be null) receives ringmaster_rpc_requests_total{method,code}.
  JobService(JobManager* jobs, NodeManager* nodes, AgentService* agents,
             const TokenAuthenticator* auth, metrics::Registry* registry);

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* context,
                                      const v1::SubmitJobRequest* request,
                                      v1::SubmitJobResponse* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const v1::GetJobRequest* request,
                                   v1::GetJobResponse* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const v1::CancelJobRequest* request,
                                      v1::CancelJobResponse* response) override;
  grpc::ServerUnaryReactor* CheckLinks(grpc::CallbackServerContext* context,
                                       const v1::CheckLinksRequest* request,
                                       v1::CheckLinksResponse* response) override;
  grpc::ServerWriteReactor<v1::WatchJobResponse>* WatchJob(
      grpc::CallbackServerContext* context, const v1::WatchJobRequest* request) override;
  grpc::ServerUnaryReactor* PlanJob(grpc::CallbackServerContext* context,
                                    const v1::PlanJobRequest* request,
                                    v1::PlanJobResponse* response) override;
  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* context,
                                      const v1::ListNodesRequest* request,
                                      v1::ListNodesResponse* response) override;
  grpc::ServerUnaryReactor* UpdateNode(grpc::CallbackServerContext* context,
                                       const v1::UpdateNodeRequest* request,
                                       v1::UpdateNodeResponse* response) override;
  grpc::ServerWriteReactor<v1::ReadLogsResponse>* ReadLogs(
      grpc::CallbackServerContext* context, const v1::ReadLogsRequest* request) override;

 private:
  absl::StatusOr<Caller> Authenticate(grpc::CallbackServerContext* context) const;
  // Counts the call and finishes it with `status`.
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const char* method,
                                 const absl::Status& status);
  void Count(const char* method, const absl::Status& status);

  JobManager* const jobs_;
  NodeManager* const nodes_;
  AgentService* const agents_;
  const TokenAuthenticator* const auth_;
  metrics::CounterFamily* requests_ = nullptr;
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_JOB_SERVICE_H_
