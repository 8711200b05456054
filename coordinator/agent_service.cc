#include "coordinator/agent_service.h"

#include <deque>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/proto_edge.h"
#include "common/status.h"

namespace ringmaster::coordinator {

// One agent's stream. Deletes itself in OnDone.
//
// Its messages are handled off gRPC's threads, in order, by the service's workers (handling may
// wait for the job lock, and a gRPC thread waiting there reads nothing: the heartbeats of every
// stream, and on a shared connection every stream's messages, would wait behind it). Heartbeats
// of a registered node are handled as soon as they are read, ahead of what waits. Up to
// kMaxQueued messages wait; then reading pauses (the node is not silent meanwhile: its heartbeats
// wait unread) until half have been handled. A message of a session no longer current (the node
// was lost, or registered again on another stream) is dropped. The stream finishes once the
// agent's side ended (or a message failed) and what was read before has been handled.
class AgentService::Stream
    : public grpc::ServerBidiReactor<v1::AgentMessage, v1::CoordinatorMessage> {
 public:
  static constexpr size_t kMaxQueued = 64;
  static constexpr int kBatch = 16;  // messages a worker handles before it lets other streams go

  // `caller` is the stream's authenticated agent (anonymous when agents are not authenticated).
  Stream(AgentService* service, Caller caller)
      : service_(service),
        caller_(std::move(caller)),
        id_(service->next_stream_id_.fetch_add(1)),
        outbox_(std::make_shared<Outbox>([this](const v1::CoordinatorMessage* m) { StartWrite(m); },
                                         [this](const grpc::Status& s) { Finish(s); })) {
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    // Unknown fields are dropped at the edge (common/proto_edge.h): nothing an agent sends is
    // stored or passed on with them. No read is under way into in_ until this call starts one.
    if (ok) SanitizeIncoming(&in_);
    bool heartbeat = false, post = false, read_more = false;
    {
      absl::MutexLock lock(&mu_);
      ++in_read_done_;  // not finished under this call (it may start a read or post a worker)
      if (!ok || failed_.has_value()) {  // the agent's side ended or broke, or a message failed
        read_ended_ = read_ended_ || !ok;
        reading_ = false;
      } else if (in_.has_heartbeat() && registered_.load(std::memory_order_acquire)) {
        heartbeat = true;
      } else {
        queue_.push_back(std::move(in_));
        in_.Clear();  // under the lock: a worker may start the next read into it once unlocked
        post = !draining_;
        draining_ = true;
        read_more = reading_ = queue_.size() < kMaxQueued;
        if (!reading_ && registered_.load(std::memory_order_acquire)) {
          service_->nodes_->StreamPaused(node_, session_);  // unread until resumed
          paused_unread_ = true;
        }
      }
    }
    if (heartbeat) {
      if (HandleTimed(in_)) {
        read_more = true;
      } else {
        absl::MutexLock lock(&mu_);
        reading_ = false;  // what was read before it is still handled
      }
    }
    if (read_more) StartRead(&in_);
    if (post) service_->workers_.Post([this] { Drain(); });
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      --in_read_done_;
      finish = FinishNowLocked();
    }
    FinishWith(finish);  // the last use of this stream here
  }

  void OnWriteDone(bool ok) override {
    std::shared_ptr<Outbox> keep = outbox_;  // OnDone may run inline and delete this.
    keep->WriteDone(ok);
  }

  void OnDone() override {
    outbox_->Close();
    // Rendezvous waits answered on this stream could no longer reach the agent; it asks again on
    // its next stream. Without this they would count as waiters until their deadline.
    service_->rendezvous_->CancelOwner(id_);
    if (!node_.empty()) {
      service_->Detach(node_, outbox_.get());
      service_->FailLogReads(node_, outbox_.get());
      // Its jobs learn it from the coordinator's ticker (NodeManager::TakeDisconnected): this
      // gRPC thread does not wait for the job lock.
      if (!service_->shutting_down_.load() && service_->nodes_->Disconnected(node_, session_)) {
        RM_LOG(WARNING) << "agent " << node_ << " disconnected: node lost";
      }
    }
    delete this;
  }

 private:
  // On a worker: handles up to kBatch queued messages, then posts itself again if more wait, or
  // finishes the stream if it is over.
  void Drain() {
    for (int handled = 0;; ++handled) {
      v1::AgentMessage message;
      bool resume = false, again = false, stop = false;
      std::optional<grpc::Status> finish;
      {
        absl::MutexLock lock(&mu_);
        if (!queue_.empty() && handled == kBatch) {
          again = stop = true;  // still draining_
        } else if (queue_.empty()) {
          draining_ = false;
          finish = FinishNowLocked();
          stop = true;
        } else {
          message = std::move(queue_.front());
          queue_.pop_front();
          if (!reading_ && !read_ended_ && !failed_.has_value() &&
              queue_.size() <= kMaxQueued / 2) {
            reading_ = resume = true;
            if (paused_unread_) service_->nodes_->StreamResumed(node_, session_);
            paused_unread_ = false;
          }
        }
      }
      if (stop) {
        // Each is the last use of this stream here: another worker may have it next.
        if (again) service_->workers_.Post([this] { Drain(); });
        FinishWith(finish);
        return;
      }
      if (resume) StartRead(&in_);
      if (registered_.load(std::memory_order_acquire) &&
          !service_->nodes_->IsCurrent(node_, session_)) {
        continue;  // a lost or replaced session's: its next heartbeat ends the stream
      }
      if (!HandleTimed(message)) {
        absl::MutexLock lock(&mu_);
        queue_.clear();  // what came after a failed message is not handled
      }
    }
  }

  // Handles `message` into ringmaster_agent_message_seconds. On failure logs it, keeps the
  // stream's first failure (the stream ends with it) and returns false.
  bool HandleTimed(const v1::AgentMessage& message) {
    const absl::Time start = absl::Now();
    const absl::Status status = Handle(message);
    service_->ObserveHandling(message, absl::Now() - start);
    if (status.ok()) return true;
    RM_LOG(WARNING) << "agent stream " << (node_.empty() ? "(unregistered)" : node_) << ": "
                    << status;
    absl::MutexLock lock(&mu_);
    if (!failed_.has_value()) failed_ = ToGrpcStatus(status);
    return false;
  }

  // Finishes the stream with `finish`, if any (FinishNowLocked's answer). The outbox is held
  // across: OnDone may free this stream meanwhile.
  void FinishWith(const std::optional<grpc::Status>& finish) {
    if (!finish.has_value()) return;
    std::shared_ptr<Outbox> keep = outbox_;
    keep->Finish(*finish);
  }

  // The status to finish the stream with, once, when it is over: the agent's side ended or a
  // message failed, and neither a worker nor OnReadDone is using the stream (a read under way may
  // stay: it ends with the stream).
  std::optional<grpc::Status> FinishNowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || draining_ || in_read_done_ > 0 || !(read_ended_ || failed_.has_value())) {
      return std::nullopt;
    }
    finished_ = true;
    return failed_.value_or(grpc::Status::OK);
  }

  absl::Status Handle(const v1::AgentMessage& message) {
    if (node_.empty() && !message.has_register_()) {
      return absl::FailedPreconditionError("the first message of an agent stream must be Register");
    }
    switch (message.body_case()) {
      case v1::AgentMessage::kRegister:
        return OnRegister(message.register_());
      case v1::AgentMessage::kHeartbeat:
        service_->ObserveHeartbeatDelay(message.heartbeat());
        return service_->nodes_->Heartbeat(node_, session_);
      case v1::AgentMessage::kWorkerState:
        if (service_->jobs_ != nullptr)
          service_->jobs_->OnWorkerState(node_, message.worker_state());
        return absl::OkStatus();
      case v1::AgentMessage::kStepSummary:
        if (service_->jobs_ != nullptr) service_->jobs_->OnStepSummary(message.step_summary());
        return absl::OkStatus();
      case v1::AgentMessage::kLinkReport:
        if (service_->jobs_ != nullptr) service_->jobs_->OnLinkReport(message.link_report());
        return absl::OkStatus();
      case v1::AgentMessage::kCheckpointFailure:
        if (service_->jobs_ != nullptr) {
          service_->jobs_->OnCheckpointFailure(message.checkpoint_failure());
        }
        return absl::OkStatus();
      case v1::AgentMessage::kRendezvous:
        OnRendezvous(message.rendezvous());
        return absl::OkStatus();
      case v1::AgentMessage::kLogData:
        service_->OnLogData(message.log_data());
        return absl::OkStatus();
      case v1::AgentMessage::kLeaving:
        RM_LOG(INFO) << "agent " << node_ << " is shutting down (" << message.leaving().reason()
                     << "): placing nothing new there";
        service_->nodes_->SetLeaving(node_);
        if (service_->jobs_ != nullptr) service_->jobs_->OnNodeLeaving(node_, message.leaving());
        return absl::OkStatus();
      case v1::AgentMessage::BODY_NOT_SET:
        break;
    }
    return absl::InvalidArgumentError("agent message has no body");
  }

  absl::Status OnRegister(const v1::Register& registration) {
    if (!node_.empty()) {
      return absl::FailedPreconditionError("Register sent twice on one stream");
    }
    // The node name is checked, then claimed for this agent identity, before anything touches
    // the node: a registration refused here leaves the node's current stream and jobs alone.
    RETURN_IF_ERROR(NodeManager::ValidateRegistration(registration));
    if (service_->identities_ != nullptr) {
      const absl::Status claimed =
          service_->identities_->Claim(registration.node(), caller_.identity);
      if (!claimed.ok()) {
        RM_LOG(WARNING) << "refused a registration of node " << registration.node() << ": "
                        << claimed.message();
        return claimed;
      }
    }
    // The stream is attached and acknowledged before reconciling sends it any command.
    auto registered = [&](uint64_t session) {
      session_ = session;
      node_ = registration.node();
      registered_.store(true, std::memory_order_release);
      service_->Attach(node_, outbox_);
      v1::CoordinatorMessage ack;
      ack.mutable_register_ack()->set_heartbeat_interval_seconds(
          absl::ToDoubleSeconds(service_->heartbeat_interval_));
      ack.mutable_register_ack()->set_lost_after_seconds(
          absl::ToDoubleSeconds(service_->lost_after_));
      outbox_->Push(std::move(ack));
    };
    if (service_->jobs_ != nullptr) {
      // Registered and reconciled at once: nothing is placed on the node in between.
      RETURN_IF_ERROR(service_->jobs_->RegisterNode(registration, registered).status());
    } else {
      ASSIGN_OR_RETURN(const uint64_t session, service_->nodes_->Register(registration));
      registered(session);
    }
    RM_LOG(INFO) << "agent " << node_ << " registered with " << registration.devices_size()
                 << " devices";
    return absl::OkStatus();
  }

  void OnRendezvous(const v1::RendezvousRequest& request) {
    RendezvousManager* rv = service_->rendezvous_;
    const std::string& job = request.job().job_id();
    const int64_t generation = request.job().generation();
    auto answer = [outbox = outbox_, id = request.request_id()](absl::StatusOr<std::string> r) {
      v1::CoordinatorMessage message;
      v1::RendezvousResponse* response = message.mutable_rendezvous();
      response->set_request_id(id);
      response->set_code(static_cast<int>(r.status().code()));
      if (r.ok()) {
        response->set_value(*std::move(r));
      } else {
        response->set_message(std::string(r.status().message()));
      }
      outbox->Push(std::move(message));
    };
    switch (request.op_case()) {
      case v1::RendezvousRequest::kSetValue: {
        absl::Status set = rv->Set(job, generation, request.key(), request.set_value());
        answer(set.ok() ? absl::StatusOr<std::string>(std::string())
                        : absl::StatusOr<std::string>(set));
        return;
      }
      case v1::RendezvousRequest::kGet:
        answer(rv->Get(job, generation, request.key()));
        return;
      case v1::RendezvousRequest::kWait:
        rv->Wait(job, generation, request.key(), absl::FromUnixNanos(request.deadline_unix_nanos()),
                 answer, id_);
        return;
      case v1::RendezvousRequest::OP_NOT_SET:
        break;
    }
    answer(absl::InvalidArgumentError("rendezvous request has no operation"));
  }

  AgentService* const service_;
  const Caller caller_;
  const uint64_t id_;  // owner of its rendezvous waits
  std::shared_ptr<Outbox> outbox_;
  v1::AgentMessage in_;  // the read under way
  // Set once, by Register on a worker, before registered_; read by OnReadDone after it.
  std::string node_;
  uint64_t session_ = 0;
  std::atomic<bool> registered_{false};

  absl::Mutex mu_;
  std::deque<v1::AgentMessage> queue_ ABSL_GUARDED_BY(mu_);  // read, not handled yet
  bool draining_ ABSL_GUARDED_BY(mu_) = false;  // a worker has this stream (posted or running)
  bool reading_ ABSL_GUARDED_BY(mu_) = true;    // a read is under way (false: paused or ended)
  int in_read_done_ ABSL_GUARDED_BY(mu_) = 0;   // OnReadDone calls running (one may be inline)
  bool read_ended_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_unread_ ABSL_GUARDED_BY(mu_) = false;  // StreamPaused told, StreamResumed not yet
  std::optional<grpc::Status> failed_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

AgentService::AgentService(NodeManager* nodes, RendezvousManager* rendezvous, Clock* clock,
                           absl::Duration heartbeat_interval, absl::Duration lost_after,
                           metrics::Registry* registry)
    : nodes_(nodes),
      rendezvous_(rendezvous),
      clock_(clock),
      heartbeat_interval_(heartbeat_interval),
      lost_after_(lost_after) {
  if (registry == nullptr) return;
  auto& family = registry->AddHistogram(
      "ringmaster_agent_message_seconds",
      "Time the coordinator spends handling one agent message, by message type.", {"type"},
      metrics::ExponentialBuckets(0.00001, 4, 10));
  const std::pair<v1::AgentMessage::BodyCase, const char*> types[] = {
      {v1::AgentMessage::kRegister, "register"},
      {v1::AgentMessage::kHeartbeat, "heartbeat"},
      {v1::AgentMessage::kWorkerState, "worker_state"},
      {v1::AgentMessage::kStepSummary, "step_summary"},
      {v1::AgentMessage::kRendezvous, "rendezvous"},
      {v1::AgentMessage::kLogData, "log_data"},
      {v1::AgentMessage::kLeaving, "leaving"},
      {v1::AgentMessage::kLinkReport, "link_report"},
      {v1::AgentMessage::kCheckpointFailure, "checkpoint_failure"}};
  heartbeat_delay_ = registry
                         ->AddHistogram("ringmaster_heartbeat_delay_seconds",
                                        "From an agent queuing a heartbeat (its clock) to the "
                                        "coordinator reading it (its clock).",
                                        {}, metrics::ExponentialBuckets(0.001, 4, 10))
                         .WithLabels({});
  for (const auto& [body_case, name] : types) {
    if (handling_seconds_.size() <= static_cast<size_t>(body_case)) {
      handling_seconds_.resize(body_case + 1);
    }
    handling_seconds_[body_case] = family.WithLabels({name});
  }
}

void AgentService::ObserveHandling(const v1::AgentMessage& message, absl::Duration took) {
  const size_t body = static_cast<size_t>(message.body_case());
  if (body < handling_seconds_.size() && handling_seconds_[body]) {
    handling_seconds_[body]->Observe(absl::ToDoubleSeconds(took));
  }
}

void AgentService::ObserveHeartbeatDelay(const v1::Heartbeat& heartbeat) {
  if (heartbeat_delay_ == nullptr || heartbeat.sent_unix_nanos() <= 0) return;
  // An agent's clock ahead of the coordinator's reads as no delay, not a negative one.
  const absl::Duration delay = clock_->Now() - absl::FromUnixNanos(heartbeat.sent_unix_nanos());
  heartbeat_delay_->Observe(absl::ToDoubleSeconds(std::max(delay, absl::ZeroDuration())));
}

namespace {

// A stream refused before anything was read from it. Deletes itself in OnDone.
class RefusedStream : public grpc::ServerBidiReactor<v1::AgentMessage, v1::CoordinatorMessage> {
 public:
  explicit RefusedStream(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

absl::StatusOr<Caller> AgentService::AuthenticateAgent(
    grpc::CallbackServerContext* context) const {
  if (auth_ == nullptr || !auth_->has_agent_tokens()) return Caller{};
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  const std::string header =
      it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
  absl::StatusOr<Caller> caller = auth_->Authenticate(header);
  if (!caller.ok()) {
    return absl::UnauthenticatedError(absl::StrCat(
        caller.status().message(), ": agents authenticate with a token of role agent (agent "
                                   "--token_file or RINGMASTER_AGENT_TOKEN)"));
  }
  if (!caller->agent) {
    return absl::PermissionDeniedError(
        absl::StrCat("user credentials are not accepted on the agent service (\"",
                     caller->identity, "\" is not an agent token)"));
  }
  return caller;
}

grpc::ServerBidiReactor<v1::AgentMessage, v1::CoordinatorMessage>* AgentService::Connect(
    grpc::CallbackServerContext* context) {
  absl::StatusOr<Caller> caller = AuthenticateAgent(context);
  if (!caller.ok()) {
    RM_LOG(WARNING) << "refused an agent stream from " << context->peer() << ": "
                    << caller.status();
    return new RefusedStream(caller.status());
  }
  return new Stream(this, *std::move(caller));
}

void AgentService::Attach(const std::string& node, std::shared_ptr<Outbox> outbox) {
  absl::MutexLock lock(&mu_);
  streams_[node] = std::move(outbox);
}

void AgentService::Detach(const std::string& node, const Outbox* outbox) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(node);
  if (it != streams_.end() && it->second.get() == outbox) streams_.erase(it);
}

bool AgentService::Send(const std::string& node, const v1::CoordinatorMessage& message) {
  std::shared_ptr<Outbox> outbox = StreamOf(node);
  return outbox != nullptr && outbox->Push(message);
}

std::shared_ptr<AgentService::Outbox> AgentService::StreamOf(const std::string& node) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(node);
  return it == streams_.end() ? nullptr : it->second;
}

}  // namespace ringmaster::coordinator

namespace ringmaster::coordinator {

void AgentService::ReadLog(const std::string& node, v1::ReadLog request,
                           std::function<void(const v1::LogData&)> done) {
  // The read is recorded with its stream before it is sent: an answer cannot come first, and
  // if that stream ends, FailLogReads finds it.
  std::shared_ptr<Outbox> outbox = StreamOf(node);
  int64_t id;
  {
    absl::MutexLock lock(&mu_);
    id = next_log_read_++;
    log_reads_[id] = PendingLogRead{outbox.get(), done};
  }
  request.set_request_id(id);
  v1::CoordinatorMessage message;
  *message.mutable_read_log() = request;
  if (outbox != nullptr && outbox->Push(message)) return;
  {
    absl::MutexLock lock(&mu_);
    log_reads_.erase(id);
  }
  v1::LogData error;
  error.set_request_id(id);
  error.set_error(absl::StrCat("node ", node, " is not connected"));
  done(error);
}

void AgentService::OnLogData(const v1::LogData& data) {
  std::function<void(const v1::LogData&)> done;
  {
    absl::MutexLock lock(&mu_);
    auto it = log_reads_.find(data.request_id());
    if (it == log_reads_.end()) return;
    done = std::move(it->second.done);
    log_reads_.erase(it);
  }
  done(data);
}

void AgentService::FailLogReads(const std::string& node, const Outbox* outbox) {
  std::vector<std::pair<int64_t, std::function<void(const v1::LogData&)>>> failed;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = log_reads_.begin(); it != log_reads_.end();) {
      auto next = std::next(it);
      if (it->second.outbox == outbox) {
        failed.emplace_back(it->first, std::move(it->second.done));
        log_reads_.erase(it);
      }
      it = next;
    }
  }
  for (auto& [id, done] : failed) {
    v1::LogData error;
    error.set_request_id(id);
    error.set_error(absl::StrCat("node ", node, " disconnected"));
    done(error);
  }
}

}  // namespace ringmaster::coordinator
