// Agent identity (issue 34, docs/security.md), attacked with real processes over mutual TLS:
//  - a user's certificate and token cannot register as a node (the real node and its job carry on);
//  - without a client CA a coordinator needs agent tokens to start, and then a stranger without a
//    credential cannot register;
//  - a node name is held by the agent identity that first registered it, across a coordinator
//    restart, until an admin releases it;
//  - an agent's token is refused on the job service.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_client.h"
#include "common/testing/subprocess.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ringmaster/v1/agent.grpc.pb.h"
#include "tests/local_cluster.h"
#include "tests/test_pki.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kUserToken[] = "user-token-alice-0123456789";
constexpr char kAdminToken[] = "admin-token-ops-0123456789";
constexpr char kAgentToken1[] = "agent-token-one-0123456789";
constexpr char kAgentToken2[] = "agent-token-two-0123456789";

// What an agent stream's registration got.
struct Registration {
  bool acked = false;
  grpc::Status status;  // OK when acked; else how the stream ended
};

class AgentIdentityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TestTempDir() + "/identity-pki");
    RunCommand({"mkdir", "-p", *dir_}, "").IgnoreError();
    MakeCert(*dir_, "ca", "", "");
    MakeCert(*dir_, "coordinator", "ca", "IP:127.0.0.1,DNS:localhost");
    MakeCert(*dir_, "agent", "ca", "DNS:agent");
    MakeCert(*dir_, "user", "ca", "DNS:user");
    std::ofstream(Path("tokens")) << kUserToken << " alice\n"
                                  << kAdminToken << " ops admin\n"
                                  << kAgentToken1 << " agents-1 agent\n"
                                  << kAgentToken2 << " agents-2 agent\n";
    std::ofstream(Path("users-only.tokens")) << kUserToken << " alice\n"
                                             << kAdminToken << " ops admin\n";
    std::ofstream(Path("agent-1.token")) << kAgentToken1 << "\n";
  }

  static std::string Path(const std::string& file) { return *dir_ + "/" + file; }

  // The coordinator with mutual TLS (or server TLS only) and the tokens file `tokens`.
  static absl::StatusOr<CoordinatorProcess> Start(const std::string& state, bool client_ca,
                                                  const std::string& tokens,
                                                  std::vector<std::string> extra = {}) {
    std::vector<std::string> flags = {"--tls_cert=" + Path("coordinator.pem"),
                                      "--tls_key=" + Path("coordinator.key"),
                                      "--state=" + state};
    if (client_ca) flags.push_back("--tls_ca=" + Path("ca.pem"));
    if (!tokens.empty()) flags.push_back("--tokens=" + tokens);
    flags.insert(flags.end(), extra.begin(), extra.end());
    return StartCoordinator(flags);
  }

  // Channel credentials trusting the cluster CA, with client certificate `cert` ("": none).
  static std::shared_ptr<grpc::ChannelCredentials> Credentials(const std::string& cert) {
    auto c = MakeChannelCredentials(
        {Path("ca.pem"), cert.empty() ? "" : Path(cert + ".pem"),
         cert.empty() ? "" : Path(cert + ".key")},
        false);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : nullptr;
  }

  // Opens AgentService.Connect at `address` with `cert` and bearer `token` ("": none) and
  // registers `node` with one CPU.
  static Registration Register(const std::string& address, const std::string& cert,
                               const std::string& token, const std::string& node) {
    auto stub = v1::AgentService::NewStub(MakeChannel(address, Credentials(cert)));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    auto stream = stub->Connect(&context);
    v1::AgentMessage hello;
    hello.mutable_register_()->set_node(node);
    hello.mutable_register_()->add_devices()->set_kind("cpu");
    stream->Write(hello);
    v1::CoordinatorMessage reply;
    Registration r;
    r.acked = stream->Read(&reply) && reply.has_register_ack();
    stream->WritesDone();
    if (r.acked) context.TryCancel();
    r.status = stream->Finish();
    if (r.acked) r.status = grpc::Status::OK;
    return r;
  }

  // ringctl at `address` over mutual TLS with the user certificate and `token`.
  static CommandResult Ctl(const std::string& address, const std::string& token,
                           std::vector<std::string> args) {
    std::vector<std::string> full = {"--tls_ca=" + Path("ca.pem"), "--tls_cert=" + Path("user.pem"),
                                     "--tls_key=" + Path("user.key"), "--token=" + token,
                                     "--coordinator=" + address, "--timeout=10"};
    full.insert(full.end(), args.begin(), args.end());
    auto r = RunRingctl(full);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : CommandResult{};
  }

  static std::string* dir_;
};

std::string* AgentIdentityTest::dir_ = nullptr;

// (a) The attack: a user's certificate and token open AgentService.Connect under a running node's
// name. Before agent identity this took the node over (its LaunchWorkers, hidden env included,
// went to the user; a forged exit failed the job).
TEST_F(AgentIdentityTest, UserCredentialsCannotRegisterAsARunningNode) {
  const std::string dir = FreshTestCaseDir();
  auto c = Start(dir + "/state.db", /*client_ca=*/true, Path("tokens"), {"--stop_grace=2"});
  ASSERT_TRUE(c.ok()) << c.status();
  CoordinatorProcess coordinator = *std::move(c);
  const std::string address = coordinator.address();
  // A real agent, with its certificate and agent token.
  char socket_dir[] = "/tmp/rm-identity-XXXXXX";
  ASSERT_NE(mkdtemp(socket_dir), nullptr);
  auto agent = Subprocess::Start(
      {"agent/agent", "--coordinator=localhost:" + std::to_string(coordinator.grpc_port),
       "--tls_ca=" + Path("ca.pem"), "--tls_cert=" + Path("agent.pem"),
       "--tls_key=" + Path("agent.key"), "--token_file=" + Path("agent-1.token"),
       "--node_name=node-a", "--devices=cpu:1", "--work_dir=" + dir + "/agent",
       "--worker_socket=" + std::string(socket_dir) + "/a.sock", "--metrics_listen=127.0.0.1:0",
       "--stop_grace=2"},
      dir + "/agent.log");
  ASSERT_TRUE(agent.ok()) << agent.status();
  ASSERT_TRUE(WaitFor(
      [&] { return absl::StrContains(Ctl(address, kAdminToken, {"nodes"}).output, "node-a"); },
      absl::Seconds(30)))
      << agent->Log();
  // alice's job runs there (its worker blocks until the test ends).
  const std::string worker = std::filesystem::absolute("agent/testing/test_worker").string();
  const std::string job_file = dir + "/job.yaml";
  std::ofstream(job_file) << "name: held\nnodes: 1\ndevices_per_node: 1\n"
                          << "parallelism: {tensor: 1, pipeline: 1, data: 1}\n"
                          << "trainer:\n  command: [\"" << worker << "\", \"--hang\"]\n"
                          << "  steps: 3\n  env: {SECRET: hunter2}\n";
  CommandResult submitted = Ctl(address, kUserToken, {"submit", "-f", job_file});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  const std::string id = submitted.output.substr(4, submitted.output.find(' ', 4) - 4);
  ASSERT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(Ctl(address, kUserToken, {"describe", "job", id}).output,
                                 "RUNNING");
      },
      absl::Seconds(30)))
      << Ctl(address, kUserToken, {"describe", "job", id}).output << agent->Log();

  // The attack, with a user's certificate and token; and with a user's certificate and no token.
  Registration with_token = Register(address, "user", kUserToken, "node-a");
  EXPECT_FALSE(with_token.acked);
  EXPECT_EQ(with_token.status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << with_token.status.error_message();
  EXPECT_THAT(with_token.status.error_message(),
              HasSubstr("user credentials are not accepted on the agent service"));
  Registration admin = Register(address, "user", kAdminToken, "node-a");
  EXPECT_FALSE(admin.acked);
  EXPECT_EQ(admin.status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  Registration no_token = Register(address, "user", "", "node-a");
  EXPECT_FALSE(no_token.acked);
  EXPECT_EQ(no_token.status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << no_token.status.error_message();

  // The real node and the job carry on: the job is still in its first generation, running, with
  // no node loss; the agent never lost its stream.
  const std::string described = Ctl(address, kUserToken, {"describe", "job", id}).output;
  EXPECT_THAT(described, HasSubstr("Generation:   1 "));
  EXPECT_THAT(described, HasSubstr("RUNNING"));
  EXPECT_THAT(described, ::testing::Not(HasSubstr("node_lost")));
  EXPECT_THAT(Ctl(address, kAdminToken, {"nodes"}).output, HasSubstr("node-a"));
  EXPECT_TRUE(agent->Running());
  EXPECT_THAT(coordinator.process.Log(), ::testing::Not(HasSubstr("agent node-a disconnected")));
  EXPECT_EQ(Ctl(address, kUserToken, {"cancel", id}).exit_code, 0);
  agent->Stop();
  coordinator.process.Stop();
  RunCommand({"rm", "-rf", socket_dir}, "").IgnoreError();
}

// (b) With server TLS only (no --tls_ca) nothing at the TLS layer identifies a caller: the
// coordinator refuses to start without agent tokens, and with them a stranger cannot register.
TEST_F(AgentIdentityTest, WithoutAClientCaAgentsMustStillAuthenticate) {
  const std::string dir = FreshTestCaseDir();
  for (const std::string& tokens : {std::string(), Path("users-only.tokens")}) {
    auto refused = Start(dir + "/refused.db", /*client_ca=*/false, tokens);
    ASSERT_FALSE(refused.ok()) << "started with tokens \"" << tokens << "\"";
    EXPECT_THAT(refused.status().message(),
                HasSubstr("--tokens: must name a file with at least one agent token"));
    EXPECT_THAT(refused.status().message(), HasSubstr("--insecure"));
  }
  auto c = Start(dir + "/state.db", /*client_ca=*/false, Path("tokens"));
  ASSERT_TRUE(c.ok()) << c.status();
  Registration stranger = Register(c->address(), "", "", "node-x");
  EXPECT_FALSE(stranger.acked);
  EXPECT_EQ(stranger.status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << stranger.status.error_message();
  Registration guessed = Register(c->address(), "", "not-a-token-0123456789", "node-x");
  EXPECT_FALSE(guessed.acked);
  EXPECT_EQ(guessed.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  Registration agent = Register(c->address(), "", kAgentToken1, "node-x");
  EXPECT_TRUE(agent.acked) << agent.status.error_message();
}

// (c) A node name is bound to the agent identity that first registered it, also across a
// coordinator restart; an admin release lets another identity take it.
TEST_F(AgentIdentityTest, ABoundNodeNameNeedsAnAdminReleaseForAnotherIdentity) {
  const std::string dir = FreshTestCaseDir();
  const std::string state = dir + "/state.db";
  {
    auto c = Start(state, /*client_ca=*/true, Path("tokens"));
    ASSERT_TRUE(c.ok()) << c.status();
    Registration first = Register(c->address(), "agent", kAgentToken1, "node-b");
    ASSERT_TRUE(first.acked) << first.status.error_message();
    Registration again = Register(c->address(), "agent", kAgentToken1, "node-b");
    EXPECT_TRUE(again.acked) << again.status.error_message();  // its own reconnection
    c->process.Stop();
  }
  auto c = Start(state, /*client_ca=*/true, Path("tokens"));
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string address = c->address();
  Registration taken = Register(address, "agent", kAgentToken2, "node-b");
  EXPECT_FALSE(taken.acked);
  EXPECT_EQ(taken.status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(taken.status.error_message(), HasSubstr("node node-b"));
  EXPECT_THAT(taken.status.error_message(), HasSubstr("\"agents-1\""));
  EXPECT_TRUE(Register(address, "agent", kAgentToken2, "node-c").acked);  // a free name

  CommandResult by_user = Ctl(address, kUserToken, {"release-node", "node-b"});
  EXPECT_EQ(by_user.exit_code, 1) << by_user.output;
  EXPECT_THAT(by_user.output, HasSubstr("admin"));
  EXPECT_FALSE(Register(address, "agent", kAgentToken2, "node-b").acked);
  CommandResult by_admin = Ctl(address, kAdminToken, {"release-node", "node-b"});
  EXPECT_EQ(by_admin.exit_code, 0) << by_admin.output;
  EXPECT_THAT(by_admin.output, HasSubstr("node node-b released"));
  Registration now = Register(address, "agent", kAgentToken2, "node-b");
  EXPECT_TRUE(now.acked) << now.status.error_message();
  EXPECT_FALSE(Register(address, "agent", kAgentToken1, "node-b").acked);  // agents-2's now
}

// (d) An agent's token opens nothing on the job service: neither an admin path nor a user's.
TEST_F(AgentIdentityTest, AgentTokensAreRefusedOnTheJobService) {
  const std::string dir = FreshTestCaseDir();
  auto c = Start(dir + "/state.db", /*client_ca=*/true, Path("tokens"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(Register(c->address(), "agent", kAgentToken1, "node-d").acked);
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"cordon", "node-d"},
        std::vector<std::string>{"release-node", "node-d"},
        std::vector<std::string>{"get", "jobs"}}) {
    CommandResult r = Ctl(c->address(), kAgentToken1, command);
    EXPECT_EQ(r.exit_code, 1) << command[0] << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("agent credentials are not accepted on the job service"))
        << command[0];
  }
  EXPECT_EQ(Ctl(c->address(), kAdminToken, {"cordon", "node-d"}).exit_code, 0);
}

}  // namespace
}  // namespace ringmaster::testing
