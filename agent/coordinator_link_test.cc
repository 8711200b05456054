// CoordinatorLink against a real gRPC server in this process: while other threads send, the
// stream ends (Stop(), or the coordinator closing it) and is replaced. A writer must never touch a
// stream the connection thread has destroyed (an agent crashed with SIGSEGV on SIGTERM this way).
#include "agent/coordinator_link.h"

#include <atomic>
#include <map>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_server.h"
#include "common/testing/wait.h"
#include "common/testing/wire_bytes.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

using ::ringmaster::testing::LengthDelimited;
using ::ringmaster::testing::NestedUnknownGroups;
using ::ringmaster::testing::WaitFor;

// Acknowledges each Register, then reads until the agent goes or, with `close_after` > 0, ends
// the stream after that many more messages (as a coordinator that restarts does). It records the
// worker states it reads, by rank. With `hold_ack`, the first acknowledgement waits for it.
class FakeCoordinator final : public v1::AgentService::Service {
 public:
  explicit FakeCoordinator(int close_after, absl::Notification* hold_ack = nullptr)
      : close_after_(close_after), hold_ack_(hold_ack) {}

  grpc::Status Connect(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::AgentMessage>* stream) override {
    v1::AgentMessage message;
    if (!stream->Read(&message) || !message.has_register_()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Register must come first");
    }
    if (hold_ack_ != nullptr) hold_ack_->WaitForNotification();
    v1::CoordinatorMessage ack;
    ack.mutable_register_ack()->set_heartbeat_interval_seconds(0.05);
    if (!stream->Write(ack)) return grpc::Status::OK;
    {
      absl::MutexLock lock(&mu_);
      ++registers_;
    }
    for (int n = 0; stream->Read(&message);) {
      absl::MutexLock lock(&mu_);
      if (message.has_worker_state()) {
        ++worker_states_;
        received_[message.worker_state().rank()].push_back(message.worker_state().pid());
      }
      if (close_after_ > 0 && ++n >= close_after_) break;
    }
    return grpc::Status::OK;
  }

  int registers() const {
    absl::MutexLock lock(&mu_);
    return registers_;
  }
  int64_t worker_states() const {
    absl::MutexLock lock(&mu_);
    return worker_states_;
  }
  // The pids of the worker states read from `rank`, in the order they came.
  std::vector<int> Received(int rank) const {
    absl::MutexLock lock(&mu_);
    auto it = received_.find(rank);
    return it == received_.end() ? std::vector<int>{} : it->second;
  }

 private:
  const int close_after_;
  absl::Notification* const hold_ack_;
  mutable absl::Mutex mu_;
  std::map<int, std::vector<int>> received_ ABSL_GUARDED_BY(mu_);
  int registers_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t worker_states_ ABSL_GUARDED_BY(mu_) = 0;
};

class CoordinatorLinkTest : public ::testing::Test {
 protected:
  void Serve(int close_after, absl::Notification* hold_ack = nullptr) {
    coordinator_ = std::make_unique<FakeCoordinator>(close_after, hold_ack);
    GrpcServerOptions options;
    options.address = "127.0.0.1:0";
    options.credentials = grpc::InsecureServerCredentials();
    options.services = {coordinator_.get()};
    auto server = GrpcServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  std::unique_ptr<CoordinatorLink> Link() {
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    return std::make_unique<CoordinatorLink>(
        channel, [] { return v1::Register(); }, [](const v1::CoordinatorMessage&) {});
  }

  // Threads that Send() worker states until destroyed.
  class Senders {
   public:
    Senders(CoordinatorLink* link, int count) {
      v1::AgentMessage message;
      message.mutable_worker_state()->set_exit_reason(std::string(4096, 'x'));
      for (int i = 0; i < count; ++i) {
        threads_.emplace_back([this, link, message] {
          while (!done_.load()) link->Send(message);
        });
      }
    }
    ~Senders() {
      done_.store(true);
      for (std::thread& t : threads_) t.join();
    }

   private:
    std::atomic<bool> done_{false};
    std::vector<std::thread> threads_;
  };

  std::unique_ptr<FakeCoordinator> coordinator_;
  std::unique_ptr<GrpcServer> server_;
};

TEST_F(CoordinatorLinkTest, StopWhileThreadsSendNeverWritesToTheClosedStream) {
  Serve(/*close_after=*/0);
  for (int round = 0; round < 30; ++round) {
    std::unique_ptr<CoordinatorLink> link = Link();
    link->Start();
    ASSERT_TRUE(WaitFor([&] { return link->connected(); }, absl::Seconds(30))) << round;
    const int64_t before = coordinator_->worker_states();
    Senders senders(link.get(), 4);
    ASSERT_TRUE(WaitFor([&] { return coordinator_->worker_states() > before; }, absl::Seconds(30)))
        << round;
    link->Stop();  // the stream is cancelled and destroyed while the senders go on
    EXPECT_FALSE(link->connected());
  }
}

TEST_F(CoordinatorLinkTest, AStreamTheCoordinatorEndsIsReplacedWhileThreadsSend) {
  Serve(/*close_after=*/20);
  std::unique_ptr<CoordinatorLink> link = Link();
  link->Start();
  {
    Senders senders(link.get(), 4);
    // Both ends count: the coordinator acknowledged ten registrations, and the link read them.
    EXPECT_TRUE(
        WaitFor([&] { return coordinator_->registers() >= 10 && link->connections() >= 10; },
                absl::Seconds(120)))
        << coordinator_->registers() << " registrations, " << link->connections() << " connections";
  }
  link->Stop();
}

// Messages sent while the link registers are queued, and those sent once it is up are written
// at once: each sender's messages still arrive, all of them, in the order it sent them (the queue
// is written first, and one queued while it is written is not left behind).
TEST_F(CoordinatorLinkTest, MessagesSentAroundTheConnectionArriveAllAndInOrder) {
  absl::Notification ack;
  Serve(/*close_after=*/0, &ack);
  std::unique_ptr<CoordinatorLink> link = Link();
  link->Start();
  constexpr int kThreads = 4, kMaxQueued = 2000, kAfterConnected = 200;
  std::vector<int> sent(kThreads, 0);
  std::atomic<int> queueing{0};  // senders that have queued a message
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      v1::AgentMessage message;
      message.mutable_worker_state()->set_rank(t);
      auto send = [&] {
        message.mutable_worker_state()->set_pid(sent[t]++);
        link->Send(message);
        if (sent[t] == 1) ++queueing;
      };
      // While registering (within the queue's bound), then once connected.
      while (!link->connected() && sent[t] < kMaxQueued) send();
      if (!WaitFor([&] { return link->connected(); }, absl::Seconds(60))) return;
      for (int i = 0; i < kAfterConnected; ++i) send();
    });
  }
  // Every sender has queued something: the registration completes among their messages.
  const bool all_queued = WaitFor([&] { return queueing.load() == kThreads; }, absl::Seconds(60));
  ack.Notify();
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(all_queued);
  ASSERT_TRUE(link->connected());
  int64_t total = 0;
  for (int n : sent) total += n;
  ASSERT_TRUE(WaitFor([&] { return coordinator_->worker_states() >= total; }, absl::Seconds(60)))
      << coordinator_->worker_states() << " of " << total;
  for (int t = 0; t < kThreads; ++t) {
    std::vector<int> expected(sent[t]);
    for (int i = 0; i < sent[t]; ++i) expected[i] = i;
    EXPECT_EQ(coordinator_->Received(t), expected) << "sender " << t;
  }
  link->Stop();
}

// A CoordinatorMessage launching job `job` whose spec carries `levels` unknown groups, each
// inside the one before (protobuf parses at most 100 levels of nesting).
std::string LaunchWithNestedGroups(const std::string& job, int levels) {
  v1::LaunchWorkers launch;
  launch.mutable_job()->set_job_id(job);
  launch.mutable_job()->set_generation(1);
  v1::JobSpec spec;
  spec.set_name(job);
  const std::string spec_bytes = spec.SerializeAsString() + NestedUnknownGroups(levels);
  const std::string launch_bytes =
      launch.SerializeAsString() + LengthDelimited(v1::LaunchWorkers::kSpecFieldNumber, spec_bytes);
  return LengthDelimited(v1::CoordinatorMessage::kLaunchFieldNumber, launch_bytes);
}

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// A coordinator that answers each Register, then writes raw bytes: a launch whose spec carries a
// few levels of unknown fields (parseable), then one nested 120 levels deep, which the agent
// cannot parse. It reads until the agent goes.
class UnparseableCoordinator final
    : public v1::AgentService::WithRawCallbackMethod_Connect<v1::AgentService::Service> {
 public:
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Connect(
      grpc::CallbackServerContext* context) override {
    return new Stream(this);
  }

  int registers() const {
    absl::MutexLock lock(&mu_);
    return registers_;
  }
  int ended() const {
    absl::MutexLock lock(&mu_);
    return ended_;
  }

 private:
  class Stream : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    explicit Stream(UnparseableCoordinator* owner) : owner_(owner) {
      v1::CoordinatorMessage ack;
      ack.mutable_register_ack()->set_heartbeat_interval_seconds(0.05);
      writes_ = {Buffer(ack.SerializeAsString()), Buffer(LaunchWithNestedGroups("shallow", 5)),
                 Buffer(LaunchWithNestedGroups("poisoned", 120))};
      StartRead(&in_);
    }
    void OnReadDone(bool ok) override {
      if (!ok) {  // the agent cancelled the call, or went
        Finish(grpc::Status::OK);
        return;
      }
      if (!registered_) {  // the Register
        registered_ = true;
        {
          absl::MutexLock lock(&owner_->mu_);
          ++owner_->registers_;
        }
        next_ = 1;
        StartWrite(&writes_[0]);
      }
      StartRead(&in_);
    }
    void OnWriteDone(bool ok) override {
      if (ok && next_ < writes_.size()) StartWrite(&writes_[next_++]);
    }
    void OnDone() override {
      {
        absl::MutexLock lock(&owner_->mu_);
        ++owner_->ended_;
      }
      delete this;
    }

   private:
    UnparseableCoordinator* const owner_;
    grpc::ByteBuffer in_;
    std::vector<grpc::ByteBuffer> writes_;
    size_t next_ = 0;  // touched by OnWriteDone only, once the first write started
    bool registered_ = false;
  };

  mutable absl::Mutex mu_;
  int registers_ ABSL_GUARDED_BY(mu_) = 0;
  int ended_ ABSL_GUARDED_BY(mu_) = 0;
};

// A message the agent cannot parse ends the stream (the link cancels it rather than waiting for
// a status that never comes, with the write lock held) and the link connects again; the commands
// it could parse reach the agent without their unknown fields.
TEST(CoordinatorLinkUnparseableTest, AMessageTheAgentCannotParseEndsTheStreamAndItReconnects) {
  UnparseableCoordinator coordinator;
  GrpcServerOptions options;
  options.address = "127.0.0.1:0";
  options.credentials = grpc::InsecureServerCredentials();
  options.services = {&coordinator};
  auto server = GrpcServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::Mutex mu;
  std::vector<v1::CoordinatorMessage> commands;
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                                     grpc::InsecureChannelCredentials());
  CoordinatorLink link(
      channel, [] { return v1::Register(); },
      [&](const v1::CoordinatorMessage& m) {
        absl::MutexLock lock(&mu);
        commands.push_back(m);
      });
  link.Start();
  // Three streams: each was cut by the unparseable launch (the coordinator saw it end) and the
  // link registered again.
  EXPECT_TRUE(WaitFor(
      [&] {
        return coordinator.registers() >= 3 && coordinator.ended() >= 2 &&
               link.connections() >= 3;
      },
      absl::Seconds(60)))
      << coordinator.registers() << " registrations, " << coordinator.ended()
      << " streams ended, " << link.connections() << " connections";
  // Sending does not wait on a stream stuck in Finish().
  v1::AgentMessage state;
  state.mutable_worker_state()->set_rank(1);
  EXPECT_TRUE(link.Send(state));
  link.Stop();
  absl::MutexLock lock(&mu);
  ASSERT_FALSE(commands.empty());
  for (const v1::CoordinatorMessage& m : commands) {
    EXPECT_EQ(m.launch().job().job_id(), "shallow");  // never the one it could not parse
    v1::JobSpec clean;
    clean.set_name("shallow");
    EXPECT_EQ(m.launch().spec().SerializeAsString(), clean.SerializeAsString());
  }
}

}  // namespace
}  // namespace ringmaster::agent
