#include "coordinator/job_service.h"

#include <atomic>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/job_state.h"
#include "common/logging.h"
#include "common/proto_edge.h"
#include "common/status.h"
#include "common/stream_outbox.h"

namespace ringmaster::coordinator {
namespace {

// Updates a watch may fall behind by before it is cut (progress comes once a second).
constexpr size_t kMaxWatchBacklog = 1024;

grpc::Status WatchTooFarBehind() {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      absl::StrCat("this watch fell ", kMaxWatchBacklog,
                                   " updates behind (the client stopped reading); watch again "
                                   "with after_sequence to resume"));
}

// Streams a job's events and progress until the job is terminal or the client leaves.
class WatchStream : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  using Outbox = StreamOutbox<grpc::ByteBuffer>;

  WatchStream(JobManager* jobs, const v1::WatchJobRequest& request)
      : jobs_(jobs),
        outbox_(std::make_shared<Outbox>([this](const grpc::ByteBuffer* m) { StartWrite(m); },
                                         [this](const grpc::Status& s) { Finish(s); })) {
    // The job's terminal state event is the last message; the stream finishes after it. Watch()
    // replays the stored events before it returns, all queued at once (at most the manager's
    // max_store_replay from the store plus its events_in_memory: past that it answers
    // RESOURCE_EXHAUSTED, which finishes the stream after them); updates that come later are
    // live, and a client that stops reading them is cut instead of buffered for.
    auto live = std::make_shared<std::atomic<bool>>(false);
    auto watch = jobs_->Watch(request.job_id(), request.after_sequence(),
                              [outbox = outbox_, live](const v1::WatchJobResponse& update) {
                                bool last = update.has_event() &&
                                            update.event().kind() == "state" &&
                                            IsTerminal(update.event().state());
                                if (!live->load()) {
                                  outbox->Push(SerializeOutgoing(update), last);
                                } else {
                                  outbox->PushBounded(SerializeOutgoing(update), last,
                                                      kMaxWatchBacklog, WatchTooFarBehind());
                                }
                              });
    live->store(true);
    if (!watch.ok()) {
      outbox_->Finish(ToGrpcStatus(watch.status()));
      return;
    }
    watch_id_ = *watch;
    // Already terminal and nothing (left) to send: finish now. A no-op if the terminal event is
    // queued, which finishes the stream itself.
    auto job = jobs_->Status(request.job_id());
    if (job.ok() && IsTerminal(job->state())) outbox_->Finish(grpc::Status::OK);
  }

  void OnWriteDone(bool ok) override {
    std::shared_ptr<Outbox> keep = outbox_;  // OnDone may run inline and delete this.
    keep->WriteDone(ok);
  }
  void OnCancel() override { outbox_->Finish(grpc::Status::CANCELLED); }
  void OnDone() override {
    outbox_->Close();
    if (watch_id_ != 0) jobs_->Unwatch(watch_id_);
    delete this;
  }

 private:
  JobManager* const jobs_;
  std::shared_ptr<Outbox> outbox_;
  uint64_t watch_id_ = 0;
};

// A job's environment values may hold its owner's secrets (API keys, storage credentials):
// other callers see the names only.
void HideEnvironmentFromOthers(const Caller& caller, v1::JobStatus* job) {
  if (OwnsOrAdministers(caller, job->owner())) return;
  for (auto& [name, value] : *job->mutable_spec()->mutable_trainer()->mutable_env()) {
    value = kHiddenEnvironmentValue;
  }
}

// Streams a rank's log from the agent that runs it: one ReadLog round trip per chunk; with
// `follow`, until the worker has exited and everything was sent (or the client leaves).
class LogStream : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  static constexpr int kChunkBytes = 64 * 1024;

  LogStream(JobManager* jobs, AgentService* agents, const v1::ReadLogsRequest& request,
            const Caller& caller)
      : state_(std::make_shared<State>()) {
    state_->agents = agents;
    state_->outbox =
        std::make_shared<Outbox>([this](const grpc::ByteBuffer* m) { StartWrite(m); },
                                 [this](const grpc::Status& s) { Finish(s); });
    auto job = jobs->Status(request.job_id());
    if (!job.ok()) {
      state_->outbox->Finish(ToGrpcStatus(job.status()));
      return;
    }
    const v1::JobStatus& status = *job;
    if (absl::Status may =
            CheckOwnerOrAdmin(caller, status.job_id(), status.owner(), "read its logs");
        !may.ok()) {
      state_->outbox->Finish(ToGrpcStatus(may));
      return;
    }
    if (request.rank() < 0 || request.rank() >= status.assignments_size()) {
      state_->outbox->Finish(
          ToGrpcStatus(FieldError("rank", absl::StrCat("must be in [0, ", status.assignments_size(),
                                                       "), got ", request.rank()))));
      return;
    }
    // Logs are read on the node of the rank's current placement.
    state_->node = status.assignments(request.rank()).node();
    state_->read.mutable_job()->set_job_id(status.job_id());
    state_->read.mutable_job()->set_generation(request.generation() > 0 ? request.generation()
                                                                        : status.generation());
    state_->read.set_rank(request.rank());
    state_->read.set_offset(request.offset());
    state_->read.set_max_bytes(kChunkBytes);
    state_->read.set_wait_seconds(request.follow() ? 1.0 : 0.0);
    state_->follow = request.follow();
    Next(state_);
  }

  void OnWriteDone(bool ok) override {
    std::shared_ptr<Outbox> keep = state_->outbox;
    keep->WriteDone(ok);
  }
  void OnCancel() override {
    state_->cancelled = true;
    state_->outbox->Finish(grpc::Status::CANCELLED);
  }
  void OnDone() override {
    state_->outbox->Close();
    delete this;
  }

 private:
  using Outbox = StreamOutbox<grpc::ByteBuffer>;
  // Shared with the pending agent round trip, which may answer after the stream is gone.
  struct State {
    AgentService* agents = nullptr;
    std::shared_ptr<Outbox> outbox;
    std::string node;
    v1::ReadLog read;
    bool follow = false;
    std::atomic<bool> cancelled{false};
  };

  static void Next(std::shared_ptr<State> state) {
    state->agents->ReadLog(state->node, state->read, [state](const v1::LogData& data) {
      if (state->cancelled) return;
      if (!data.error().empty()) {
        // The coordinator is up; the node is not (or has no such log): not UNAVAILABLE.
        state->outbox->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, data.error()));
        return;
      }
      const bool more = static_cast<int>(data.data().size()) == kChunkBytes;
      const bool done = data.eof() || (!state->follow && !more);
      state->read.set_offset(data.next_offset());
      if (!data.data().empty()) {
        v1::ReadLogsResponse chunk;
        chunk.set_data(data.data());
        chunk.set_next_offset(data.next_offset());
        state->outbox->Push(SerializeOutgoing(chunk), done);
      } else if (done) {
        state->outbox->Finish(grpc::Status::OK);
      }
      if (!done) Next(state);
    });
  }

  std::shared_ptr<State> state_;
};

// Finishes at once with a status (for refused streams).
class RefusedStream : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedStream(const absl::Status& status) { this->Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

JobService::JobService(JobManager* jobs, NodeManager* nodes, AgentService* agents,
                       const TokenAuthenticator* auth, metrics::Registry* registry)
    : jobs_(jobs), nodes_(nodes), agents_(agents), auth_(auth) {
  if (registry != nullptr) {
    requests_ =
        &registry->AddCounter("ringmaster_rpc_requests_total",
                              "JobService calls by method and result code.", {"method", "code"});
  }
}

void JobService::Count(const char* method, const absl::Status& status) {
  if (requests_ != nullptr) {
    requests_->WithLabels({method, absl::StatusCodeToString(status.code())})->Increment();
  }
}

grpc::ServerUnaryReactor* JobService::Done(grpc::CallbackServerContext* context, const char* method,
                                           const absl::Status& status) {
  Count(method, status);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::StatusOr<Caller> JobService::Authenticate(grpc::CallbackServerContext* context) const {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  std::string header =
      it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
  absl::StatusOr<Caller> caller = auth_->Authenticate(header);
  // An agent's token is for the AgentService only: it may neither act as a user (submit jobs, see
  // them) nor reach an admin path (docs/security.md).
  if (caller.ok() && caller->agent) {
    return absl::PermissionDeniedError(
        "agent credentials are not accepted on the job service (use a user or admin token)");
  }
  return caller;
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* JobService::Unary(grpc::CallbackServerContext* context,
                                            const char* method, const grpc::ByteBuffer* in,
                                            grpc::ByteBuffer* out,
                                            absl::Status (JobService::*handle)(const Caller&,
                                                                               const Request&,
                                                                               Response*)) {
  // The caller first: a stranger's request is not parsed.
  auto caller = Authenticate(context);
  if (!caller.ok()) return Done(context, method, caller.status());
  Request request;
  absl::Status status = ParseIncoming(*in, &request);
  Response response;
  if (status.ok()) status = (this->*handle)(*caller, request, &response);
  if (status.ok()) *out = SerializeOutgoing(response);
  return Done(context, method, status);
}

grpc::ServerUnaryReactor* JobService::SubmitJob(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) {
  return Unary(context, "SubmitJob", request, response, &JobService::DoSubmitJob);
}

grpc::ServerUnaryReactor* JobService::GetJob(grpc::CallbackServerContext* context,
                                             const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) {
  return Unary(context, "GetJob", request, response, &JobService::DoGetJob);
}

grpc::ServerUnaryReactor* JobService::ListJobs(grpc::CallbackServerContext* context,
                                               const grpc::ByteBuffer* request,
                                               grpc::ByteBuffer* response) {
  return Unary(context, "ListJobs", request, response, &JobService::DoListJobs);
}

grpc::ServerUnaryReactor* JobService::CancelJob(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) {
  return Unary(context, "CancelJob", request, response, &JobService::DoCancelJob);
}

grpc::ServerUnaryReactor* JobService::CheckLinks(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  return Unary(context, "CheckLinks", request, response, &JobService::DoCheckLinks);
}

grpc::ServerUnaryReactor* JobService::PlanJob(grpc::CallbackServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) {
  return Unary(context, "PlanJob", request, response, &JobService::DoPlanJob);
}

grpc::ServerUnaryReactor* JobService::ListNodes(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) {
  return Unary(context, "ListNodes", request, response, &JobService::DoListNodes);
}

grpc::ServerUnaryReactor* JobService::UpdateNode(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  return Unary(context, "UpdateNode", request, response, &JobService::DoUpdateNode);
}

absl::Status JobService::DoSubmitJob(const Caller& caller, const v1::SubmitJobRequest& request,
                                     v1::SubmitJobResponse* response) {
  RETURN_IF_ERROR(CheckJsonSize(request.spec(), "spec", kMaxJobSpecJsonBytes));
  ASSIGN_OR_RETURN(*response->mutable_job(),
                   jobs_->Submit(request.spec(), request.request_id(), caller));
  return absl::OkStatus();
}

absl::Status JobService::DoGetJob(const Caller& caller, const v1::GetJobRequest& request,
                                  v1::GetJobResponse* response) {
  ASSIGN_OR_RETURN(*response, jobs_->Get(request.job_id()));
  HideEnvironmentFromOthers(caller, response->mutable_job());
  return absl::OkStatus();
}

absl::Status JobService::DoListJobs(const Caller& caller, const v1::ListJobsRequest& request,
                                    v1::ListJobsResponse* response) {
  std::vector<v1::JobState> states;
  for (int s : request.states()) states.push_back(static_cast<v1::JobState>(s));
  ASSIGN_OR_RETURN(auto page, jobs_->List(states, request.limit(), request.page_token()));
  for (auto& job : page.jobs) {
    HideEnvironmentFromOthers(caller, &job);
    *response->add_jobs() = std::move(job);
  }
  response->set_next_page_token(std::move(page.next_page_token));
  return absl::OkStatus();
}

absl::Status JobService::DoCancelJob(const Caller& caller, const v1::CancelJobRequest& request,
                                     v1::CancelJobResponse* response) {
  ASSIGN_OR_RETURN(*response->mutable_job(),
                   jobs_->Cancel(request.job_id(), request.reason(), caller));
  return absl::OkStatus();
}

absl::Status JobService::DoCheckLinks(const Caller& caller, const v1::CheckLinksRequest& request,
                                      v1::CheckLinksResponse* response) {
  ASSIGN_OR_RETURN(*response, jobs_->RequestLinkCheck(request.job_id(), caller));
  return absl::OkStatus();
}

absl::Status JobService::DoPlanJob(const Caller& caller, const v1::PlanJobRequest& request,
                                   v1::PlanJobResponse* response) {
  RETURN_IF_ERROR(CheckJsonSize(request.spec(), "spec", kMaxJobSpecJsonBytes));
  ASSIGN_OR_RETURN(*response, jobs_->Plan(request.spec()));
  return absl::OkStatus();
}

absl::Status JobService::DoListNodes(const Caller& caller, const v1::ListNodesRequest& request,
                                     v1::ListNodesResponse* response) {
  for (auto& node : nodes_->List()) *response->add_nodes() = std::move(node);
  return absl::OkStatus();
}

absl::Status JobService::DoUpdateNode(const Caller& caller, const v1::UpdateNodeRequest& request,
                                      v1::UpdateNodeResponse* response) {
  if (request.release_identity()) {
    NodeIdentities* identities = agents_->node_identities();
    if (identities == nullptr) return absl::FailedPreconditionError("node identities are not kept");
    ASSIGN_OR_RETURN(const std::optional<std::string> released,
                     identities->Release(request, caller));
    RM_LOG(INFO) << "node " << request.node() << ": released from agent identity "
                 << released.value_or("(none)")
                 << (caller.identity.empty() ? "" : " by " + caller.identity);
    absl::StatusOr<v1::NodeStatus> now = nodes_->Status(request.node());
    if (now.ok()) {
      *response->mutable_node() = *std::move(now);
    } else {
      response->mutable_node()->set_name(request.node());  // not registered at the moment
    }
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(*response, jobs_->UpdateNode(request, caller));
  return absl::OkStatus();
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* JobService::WatchJob(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  auto caller = Authenticate(context);
  v1::WatchJobRequest watch;
  absl::Status status = caller.ok() ? ParseIncoming(*request, &watch) : caller.status();
  Count("WatchJob", status);
  if (!status.ok()) return new RefusedStream(status);
  return new WatchStream(jobs_, watch);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* JobService::ReadLogs(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  auto caller = Authenticate(context);
  v1::ReadLogsRequest read;
  absl::Status status = caller.ok() ? ParseIncoming(*request, &read) : caller.status();
  Count("ReadLogs", status);
  if (!status.ok()) return new RefusedStream(status);
  return new LogStream(jobs_, agents_, read, *caller);
}

}  // namespace ringmaster::coordinator
