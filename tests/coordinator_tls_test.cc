// Mutual TLS on the coordinator: clients and agents with a certificate from the cluster CA get
// in; no certificate, a certificate from another CA, or plaintext are refused. (Agents also need
// an agent token: tests/agent_identity_test.cc.)
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/grpc_client.h"
#include "gtest/gtest.h"
#include "proto/ringmaster/v1/agent.grpc.pb.h"
#include "tests/local_cluster.h"
#include "tests/test_pki.h"

namespace ringmaster::testing {
namespace {

class CoordinatorTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TestTempDir() + "/pki");
    RunCommand({"mkdir", "-p", *dir_}, "").IgnoreError();
    MakeCert(*dir_, "ca", "", "");
    MakeCert(*dir_, "coordinator", "ca", "IP:127.0.0.1,DNS:localhost");
    MakeCert(*dir_, "user", "ca", "DNS:user");
    MakeCert(*dir_, "rogue-ca", "", "");
    MakeCert(*dir_, "rogue", "rogue-ca", "DNS:rogue");
    std::ofstream(Path("tokens")) << kAgentToken << " agents agent\n";
  }

  void SetUp() override {
    auto c = StartCoordinator(
        {"--tls_ca=" + Path("ca.pem"), "--tls_cert=" + Path("coordinator.pem"),
         "--tls_key=" + Path("coordinator.key"), "--tokens=" + Path("tokens"),
         "--state=" + TestTempDir() + "/tls-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db"});
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::make_unique<CoordinatorProcess>(std::move(*c));
  }

  static std::string Path(const std::string& file) { return *dir_ + "/" + file; }

  CommandResult Health(std::vector<std::string> flags) {
    flags.push_back("--coordinator=" + coordinator_->address());
    flags.push_back("--timeout=5");
    flags.push_back("health");
    auto r = RunRingctl(flags);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : CommandResult{};
  }

  // Opens an agent stream with `credentials` and the agent token, and sends Register; returns
  // the stream's status after the first read (OK with an ack when accepted).
  grpc::Status AgentRegister(std::shared_ptr<grpc::ChannelCredentials> credentials, bool* acked) {
    auto stub = v1::AgentService::NewStub(MakeChannel(coordinator_->address(), credentials));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    context.AddMetadata("authorization", std::string("Bearer ") + kAgentToken);
    auto stream = stub->Connect(&context);
    v1::AgentMessage hello;
    hello.mutable_register_()->set_node("tls-node");
    v1::Device* d = hello.mutable_register_()->add_devices();
    d->set_kind("cpu");
    stream->Write(hello);
    v1::CoordinatorMessage reply;
    *acked = stream->Read(&reply) && reply.has_register_ack();
    stream->WritesDone();
    if (*acked) context.TryCancel();
    grpc::Status status = stream->Finish();
    return *acked ? grpc::Status::OK : status;
  }

  static constexpr char kAgentToken[] = "agent-token-0123456789abcdef";
  static std::string* dir_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
};

std::string* CoordinatorTlsTest::dir_ = nullptr;

TEST_F(CoordinatorTlsTest, ClientWithClusterCertificateIsServed) {
  CommandResult r = Health({"--tls_ca=" + Path("ca.pem"), "--tls_cert=" + Path("user.pem"),
                            "--tls_key=" + Path("user.key")});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(CoordinatorTlsTest, ClientWithoutCertificateIsRefused) {
  CommandResult r = Health({"--tls_ca=" + Path("ca.pem")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
}

TEST_F(CoordinatorTlsTest, ClientWithForeignCertificateIsRefused) {
  CommandResult r = Health({"--tls_ca=" + Path("ca.pem"), "--tls_cert=" + Path("rogue.pem"),
                            "--tls_key=" + Path("rogue.key")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
}

TEST_F(CoordinatorTlsTest, PlaintextClientIsRefused) {
  CommandResult r = Health({"--insecure"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
}

TEST_F(CoordinatorTlsTest, AgentsNeedAValidCertificate) {
  auto creds = [&](const std::string& name) {
    auto c = MakeChannelCredentials({Path("ca.pem"), name.empty() ? "" : Path(name + ".pem"),
                                     name.empty() ? "" : Path(name + ".key")},
                                    false);
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  };
  bool acked = false;
  EXPECT_FALSE(AgentRegister(creds("rogue"), &acked).ok());
  EXPECT_FALSE(acked);
  EXPECT_FALSE(AgentRegister(creds(""), &acked).ok());
  EXPECT_FALSE(acked);
  EXPECT_TRUE(AgentRegister(creds("user"), &acked).ok());
  EXPECT_TRUE(acked);
}

}  // namespace
}  // namespace ringmaster::testing
