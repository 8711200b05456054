// A command job needs only what its program uses (issue 36, point 4), against a real coordinator
// and agent: one with no trainer.steps succeeds once every rank exits 0; the keys only the builtin
// trainer reads are refused naming the key, by ringctl before it sends the spec and by the
// coordinator for a spec sent over gRPC directly; the builtin trainer's own program run as a
// command may still carry them. One cluster (one agent, two CPU slots) serves every case.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/grpc_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ringmaster/v1/coordinator.grpc.pb.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::string_view kRule =
    ": only the builtin trainer reads it; a command job's program takes its settings from its "
    "own argv and trainer.env (remove the key, or use builtin: gpt)";

class CommandJobTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    TestClusterOptions options;
    options.agents = 1;
    options.slots = 2;
    auto c = TestCluster::Start(std::string(tmp == nullptr ? "/tmp" : tmp) + "/cluster", options);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr) << "the cluster did not start"; }

  // SubmitJob over gRPC, as a client other than ringctl would.
  static grpc::Status SubmitDirectly(const v1::JobSpec& spec) {
    auto stub = v1::JobService::NewStub(
        MakeChannel(cluster_->coordinator().address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    v1::SubmitJobResponse response;
    return stub->SubmitJob(&context, request, &response);
  }

  static TestCluster* cluster_;
};

TestCluster* CommandJobTest::cluster_ = nullptr;

TEST_F(CommandJobTest, AJobWithoutStepsSucceedsWhenEveryRankExitsZero) {
  const std::string id = cluster_->Submit(
      "nosteps", "name: nosteps\nnodes: 1\ndevices_per_node: 2\n"
                 "trainer:\n  command: [/bin/sh, -c, \"echo rank $RANK done\"]\n"
                 "restart: {max_restarts: 0}\n");
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(60)), "SUCCEEDED")
      << cluster_->Ctl({"describe", id}).output;
  EXPECT_THAT(cluster_->RankLog(id, 1, 1), HasSubstr("rank 1 done"));

  // A rank that fails still fails it (no restart allowed).
  const std::string failing = cluster_->Submit(
      "failing", "name: failing\nnodes: 1\ndevices_per_node: 2\n"
                 "trainer:\n  command: [/bin/sh, -c, \"exit $RANK\"]\n"
                 "restart: {max_restarts: 0}\n");
  ASSERT_FALSE(failing.empty());
  EXPECT_EQ(cluster_->WaitForEnd(failing, absl::Seconds(60)), "FAILED");
}

TEST_F(CommandJobTest, RingctlRefusesTheBuiltinTrainersKeysNamingThem) {
  const std::string path = cluster_->dir() + "/model.yaml";
  std::ofstream(path) << "name: model\nnodes: 1\ndevices_per_node: 1\ntrainer:\n"
                      << "  command: [python3, train.py]\n  model: {layers: 2}\n"
                      << "  optimizer: {lr: 1.0e-3}\n";
  CommandResult r = cluster_->Ctl({"submit", "-f", path});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat(path, ":6:3: trainer.model", kRule)));
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat(path, ":7:3: trainer.optimizer", kRule)));
}

TEST_F(CommandJobTest, TheCoordinatorRefusesThemOverGrpc) {
  v1::JobSpec spec;
  spec.set_name("direct");
  spec.set_nodes(1);
  spec.set_devices_per_node(1);
  spec.mutable_trainer()->mutable_command()->add_argv("/bin/true");
  spec.mutable_trainer()->set_zero_stage(1);
  spec.mutable_trainer()->mutable_batch()->set_micro_batch(2);
  const grpc::Status status = SubmitDirectly(spec);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            absl::StrCat("trainer.batch", kRule, "\ntrainer.zero_stage", kRule));

  // Without them it is accepted (and needs no steps).
  spec.mutable_trainer()->clear_zero_stage();
  spec.mutable_trainer()->clear_batch();
  const grpc::Status accepted = SubmitDirectly(spec);
  EXPECT_TRUE(accepted.ok()) << accepted.error_message();
}

TEST_F(CommandJobTest, TheBuiltinTrainersProgramAsACommandRunsWithDefaults) {
  // No optimizer at all: the documented defaults apply; the trainer program reads the model.
  const std::string id = cluster_->Submit(
      "trainer", absl::StrCat("name: trainer\nnodes: 1\ndevices_per_node: 1\ntrainer:\n"
                              "  command: [\"", TestCluster::Runfile("trainer/trainer"), "\"]\n",
                              "  model: {layers: 1, d_model: 32, heads: 2, seq_len: 16, "
                              "vocab: 128}\n  batch: {micro_batch: 1, global_batch: 1}\n"
                              "  steps: 2\n  precision: fp32\nrestart: {max_restarts: 0}\n"));
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(120)), "SUCCEEDED")
      << cluster_->RankLog(id, 1, 0);
}

}  // namespace
}  // namespace ringmaster::testing
