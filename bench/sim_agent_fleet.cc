#include "bench/sim_agent_fleet.h"

#include <cstdlib>
#include <deque>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "common/stream_outbox.h"
#include "grpcpp/create_channel.h"
#include "proto/ringmaster/v1/agent.grpc.pb.h"

namespace ringmaster::bench {

class SimAgentFleet::Agent
    : public grpc::ClientBidiReactor<v1::AgentMessage, v1::CoordinatorMessage> {
 public:
  Agent(SimAgentFleet* fleet, v1::AgentService::Stub* stub, std::string name)
      : fleet_(fleet),
        name_(std::move(name)),
        outbox_(std::make_shared<StreamOutbox<v1::AgentMessage>>(
            [this](const v1::AgentMessage* m) { StartWrite(m); }, nullptr)) {
    stub->async()->Connect(&context_, this);
    v1::AgentMessage hello;
    v1::Register* r = hello.mutable_register_();
    r->set_node(name_);
    r->set_host_address("127.0.0.1");
    for (int i = 0; i < fleet_->options_.devices_per_agent; ++i) {
      v1::Device* d = r->add_devices();
      d->set_index(i);
      d->set_kind("cpu");
      d->set_model("sim-slot");
    }
    Push(std::move(hello));
    StartRead(&in_);
    // Writes start outside gRPC's callbacks too (heartbeats, released exits): the hold keeps the
    // call until the read loop has ended and the outbox is closed, so that no write can start on
    // a reactor gRPC already finished with.
    AddHold();
    StartCall();
  }

  void Push(v1::AgentMessage message) { outbox_->Push(std::move(message)); }

  void Heartbeat() {
    v1::AgentMessage m;
    m.mutable_heartbeat()->set_sequence(++heartbeats_);
    m.mutable_heartbeat()->set_sent_unix_nanos(absl::ToUnixNanos(absl::Now()));
    Push(std::move(m));
  }

  void Close() { context_.TryCancel(); }

  void OnWriteDone(bool ok) override {
    auto keep = outbox_;
    keep->WriteDone(ok);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The stream ended. Closed first: a write already starting finishes under the hold, and
      // none starts after it. OnDone follows.
      outbox_->Close();
      RemoveHold();
      return;
    }
    Handle(in_);
    StartRead(&in_);
  }

  void OnDone(const grpc::Status& status) override {
    outbox_->Close();
    absl::MutexLock lock(&fleet_->mu_);
    ++fleet_->done_;
  }

 private:
  void Handle(const v1::CoordinatorMessage& message) {
    if (message.has_register_ack()) {
      fleet_->OnRegistered();
    } else if (message.has_launch()) {
      const v1::LaunchWorkers& launch = message.launch();
      absl::MutexLock lock(&ranks_mu_);
      job_ = launch.job();
      for (const v1::RankAssignment& a : launch.assignments()) {
        v1::AgentMessage m;
        v1::RendezvousRequest* r = m.mutable_rendezvous();
        r->set_request_id(a.rank());
        *r->mutable_job() = launch.job();
        r->set_rank(a.rank());
        r->set_key(fleet_->options_.rendezvous_key);
        if (a.rank() == 0) {
          r->set_set_value("ready");
        } else {
          r->set_wait(true);
          r->set_deadline_unix_nanos(
              absl::ToUnixNanos(absl::Now() + fleet_->options_.rendezvous_timeout));
        }
        Push(std::move(m));
      }
    } else if (message.has_rendezvous()) {
      const v1::RendezvousResponse& r = message.rendezvous();
      v1::AgentMessage exited;
      v1::WorkerState* w = exited.mutable_worker_state();
      w->set_rank(static_cast<int>(r.request_id()));
      w->set_phase(v1::WORKER_PHASE_EXITED);
      w->set_exit_code(0);
      {
        absl::MutexLock lock(&ranks_mu_);
        *w->mutable_job() = job_;
        if (!fleet_->ExitsReleased()) {
          held_exits_.push_back(std::move(exited));
          exited.Clear();
        }
      }
      if (exited.has_worker_state()) Push(std::move(exited));
      fleet_->OnRendezvousAnswer(r.code() == 0);
    }
  }

 public:
  void ReleaseExits() {
    std::vector<v1::AgentMessage> exits;
    {
      absl::MutexLock lock(&ranks_mu_);
      exits.swap(held_exits_);
    }
    for (v1::AgentMessage& m : exits) Push(std::move(m));
  }

 private:
  SimAgentFleet* const fleet_;
  const std::string name_;
  grpc::ClientContext context_;
  v1::CoordinatorMessage in_;
  std::atomic<int64_t> heartbeats_{0};
  std::shared_ptr<StreamOutbox<v1::AgentMessage>> outbox_;
  absl::Mutex ranks_mu_;
  v1::JobGeneration job_ ABSL_GUARDED_BY(ranks_mu_);
  std::vector<v1::AgentMessage> held_exits_ ABSL_GUARDED_BY(ranks_mu_);
};

SimAgentFleet::SimAgentFleet(FleetOptions options) : options_(std::move(options)) {}

SimAgentFleet::~SimAgentFleet() {
  Shutdown();
  absl::MutexLock lock(&mu_);
  const bool all_done =
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](SimAgentFleet* f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(f->mu_) {
                                 return f->done_ >= static_cast<int64_t>(f->agents_.size());
                               },
                               this),
                           absl::Seconds(30));
  // A stream still open would call into its agent, and into this fleet, later.
  if (!all_done) {
    std::cerr << "sim fleet: " << static_cast<int64_t>(agents_.size()) - done_
              << " streams did not end 30 s after they were cancelled\n";
    std::abort();
  }
  for (Agent* a : agents_) delete a;
}

absl::Status SimAgentFleet::Register(absl::Duration timeout) {
  Connect();
  return AwaitRegistered(timeout);
}

void SimAgentFleet::Connect() {
  for (int c = 0; c < options_.channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("ringmaster.bench_channel", c);  // Distinct args: a connection per channel.
    channels_.push_back(
        grpc::CreateCustomChannel(options_.target, grpc::InsecureChannelCredentials(), args));
  }
  for (auto& ch : channels_) stubs_.push_back(v1::AgentService::NewStub(ch));
  for (int i = 0; i < options_.agents; ++i) {
    agents_.push_back(new Agent(this, stubs_[i % stubs_.size()].get(), absl::StrCat("sim-", i)));
  }
}

absl::Status SimAgentFleet::AwaitRegistered(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  bool all = mu_.AwaitWithTimeout(absl::Condition(
                                      +[](SimAgentFleet* f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(f->mu_) {
                                        return f->registered_ >= f->options_.agents;
                                      },
                                      this),
                                  timeout);
  if (!all) {
    return absl::UnavailableError(
        absl::StrCat(registered_, " of ", options_.agents, " agents registered in time"));
  }
  return absl::OkStatus();
}

void SimAgentFleet::HeartbeatAll() {
  for (Agent* a : agents_) a->Heartbeat();
}

absl::StatusOr<int64_t> SimAgentFleet::WaitForRendezvous(int64_t ranks, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  struct Arg {
    SimAgentFleet* fleet;
    int64_t ranks;
  } arg{this, ranks};
  bool done = mu_.AwaitWithTimeout(
      absl::Condition(
          +[](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->fleet->answers_ >= a->ranks; },
          &arg),
      timeout);
  if (!done) {
    return absl::DeadlineExceededError(
        absl::StrCat(answers_, " of ", ranks, " rendezvous answers in time"));
  }
  return ok_answers_;
}

bool SimAgentFleet::ExitsReleased() {
  absl::MutexLock lock(&mu_);
  return !options_.hold_exits || exits_released_;
}

void SimAgentFleet::ReleaseExits() {
  {
    absl::MutexLock lock(&mu_);
    exits_released_ = true;
  }
  for (Agent* a : agents_) a->ReleaseExits();
}

void SimAgentFleet::Shutdown() {
  for (Agent* a : agents_) a->Close();
}

void SimAgentFleet::OnRegistered() {
  absl::MutexLock lock(&mu_);
  ++registered_;
}

void SimAgentFleet::OnRendezvousAnswer(bool ok) {
  absl::MutexLock lock(&mu_);
  ++answers_;
  if (ok) ++ok_answers_;
}

}  // namespace ringmaster::bench
