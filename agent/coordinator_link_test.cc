// CoordinatorLink against a real gRPC server in this process: while other threads send, the
// stream ends (Stop(), or the coordinator closing it) and is replaced. A writer must never touch a
// stream the connection thread has destroyed (an agent crashed with SIGSEGV on SIGTERM this way).
#include "agent/coordinator_link.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/grpc_server.h"
#include "common/testing/wait.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

using ::ringmaster::testing::WaitFor;

// Acknowledges each Register, then reads until the agent goes or, with `close_after` > 0, ends
// the stream after that many more messages (as a coordinator that restarts does).
class FakeCoordinator final : public v1::AgentService::Service {
 public:
  explicit FakeCoordinator(int close_after) : close_after_(close_after) {}

  grpc::Status Connect(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::AgentMessage>* stream) override {
    v1::AgentMessage message;
    if (!stream->Read(&message) || !message.has_register_()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Register must come first");
    }
    v1::CoordinatorMessage ack;
    ack.mutable_register_ack()->set_heartbeat_interval_seconds(0.05);
    if (!stream->Write(ack)) return grpc::Status::OK;
    {
      absl::MutexLock lock(&mu_);
      ++registers_;
    }
    for (int n = 0; stream->Read(&message);) {
      absl::MutexLock lock(&mu_);
      if (message.has_worker_state()) ++worker_states_;
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

 private:
  const int close_after_;
  mutable absl::Mutex mu_;
  int registers_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t worker_states_ ABSL_GUARDED_BY(mu_) = 0;
};

class CoordinatorLinkTest : public ::testing::Test {
 protected:
  void Serve(int close_after) {
    coordinator_ = std::make_unique<FakeCoordinator>(close_after);
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
    ASSERT_TRUE(WaitFor([&] { return coordinator_->registers() >= 10; }, absl::Seconds(120)))
        << coordinator_->registers() << " registrations";
  }
  EXPECT_GE(link->connections(), 10);
  link->Stop();
}

}  // namespace
}  // namespace ringmaster::agent
