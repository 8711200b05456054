// JobService: the user-facing API. Thin: authenticates the caller, parses and bounds requests,
// converts protos and Status at the boundary, hides other callers' secrets, and calls the
// JobManager. Unary calls finish inline on gRPC's callback threads; WatchJob is a server stream fed
// by the job manager without a thread per watcher.
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

// Every method is registered raw (the generated WithRawCallbackMethod_ wrappers) and parses its
// request itself, after authenticating the caller: gRPC's callback API answers a request it
// cannot parse UNIMPLEMENTED with no message, and keeps unknown fields. Here a malformed or too
// deeply nested request is INVALID_ARGUMENT "request: not a valid <type> ...", unknown fields are
// dropped (common/proto_edge.h), and a job spec (SubmitJob, PlanJob) is at most
// kMaxJobSpecJsonBytes as JSON (INVALID_ARGUMENT "spec: must be at most ...").
using RawJobService = v1::JobService::WithRawCallbackMethod_SubmitJob<
    v1::JobService::WithRawCallbackMethod_GetJob<v1::JobService::WithRawCallbackMethod_ListJobs<
        v1::JobService::WithRawCallbackMethod_CancelJob<
            v1::JobService::WithRawCallbackMethod_WatchJob<
                v1::JobService::WithRawCallbackMethod_PlanJob<
                    v1::JobService::WithRawCallbackMethod_ListNodes<
                        v1::JobService::WithRawCallbackMethod_UpdateNode<
                            v1::JobService::WithRawCallbackMethod_ReadLogs<
                                v1::JobService::WithRawCallbackMethod_CheckLinks<
                                    v1::JobService::Service>>>>>>>>>>;

class JobService final : public RawJobService {
 public:
  // Pointers must outlive the service.
  // `registry` (may be null) receives ringmaster_rpc_requests_total{method,code}.
  JobService(JobManager* jobs, NodeManager* nodes, AgentService* agents,
             const TokenAuthenticator* auth, metrics::Registry* registry);

  // The request and response of each unary method are its v1 messages, serialized.
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CheckLinks(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  // Streams v1.WatchJobResponse messages.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchJob(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* PlanJob(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* UpdateNode(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  // Streams v1.ReadLogsResponse messages.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* ReadLogs(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;

 private:
  absl::StatusOr<Caller> Authenticate(grpc::CallbackServerContext* context) const;
  // Authenticates, parses `in` as a Request, runs `handle` and serializes its Response into `out`;
  // counts the call and finishes it.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, const char* method,
                                  const grpc::ByteBuffer* in, grpc::ByteBuffer* out,
                                  absl::Status (JobService::*handle)(const Caller&, const Request&,
                                                                     Response*));
  absl::Status DoSubmitJob(const Caller& caller, const v1::SubmitJobRequest& request,
                           v1::SubmitJobResponse* response);
  absl::Status DoGetJob(const Caller& caller, const v1::GetJobRequest& request,
                        v1::GetJobResponse* response);
  absl::Status DoListJobs(const Caller& caller, const v1::ListJobsRequest& request,
                          v1::ListJobsResponse* response);
  absl::Status DoCancelJob(const Caller& caller, const v1::CancelJobRequest& request,
                           v1::CancelJobResponse* response);
  absl::Status DoCheckLinks(const Caller& caller, const v1::CheckLinksRequest& request,
                            v1::CheckLinksResponse* response);
  absl::Status DoPlanJob(const Caller& caller, const v1::PlanJobRequest& request,
                         v1::PlanJobResponse* response);
  absl::Status DoListNodes(const Caller& caller, const v1::ListNodesRequest& request,
                           v1::ListNodesResponse* response);
  absl::Status DoUpdateNode(const Caller& caller, const v1::UpdateNodeRequest& request,
                            v1::UpdateNodeResponse* response);
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
