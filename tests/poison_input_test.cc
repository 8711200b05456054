// Untrusted input cannot poison the cluster (issue 34, point 2), with a real coordinator and two
// real agents on loopback, the attacks sent as raw bytes:
// - a SubmitJob whose spec carries unknown groups nested 99 levels deep (protobuf parses 100:
//   wrapped in a ListJobsResponse or a LaunchWorkers nobody could parse it; `ringctl get jobs`
//   failed and every agent the job was placed on was cut off for good) is refused, and one
//   nested a little is accepted with its unknown fields dropped and runs;
// - a job stored by an older coordinator with such a spec is sanitized on recovery;
// - garbage bytes get INVALID_ARGUMENT with a message on every JobService method (gRPC's
//   callback API answered UNIMPLEMENTED with none), and a spec over 64 KiB as JSON is refused.
// Afterwards `ringctl get jobs` works, a normal job runs on both agents, and both stay alive.
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_client.h"
#include "common/testing/wait.h"
#include "common/testing/wire_bytes.h"
#include "coordinator/job_store.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/ringmaster/v1/coordinator.grpc.pb.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kStoredPoisonId[] = "old-poison-0001";

// `message` followed by `levels` unknown groups (field 1000), each inside the one before.
std::string WithNestedUnknownGroups(const google::protobuf::Message& message, int levels) {
  return message.SerializeAsString() + NestedUnknownGroups(levels);
}

// A 2-node x 1-slot command job of the test worker, 3 quick steps.
v1::JobSpec QuickSpec(const std::string& name) {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.set_nodes(2);
  spec.set_devices_per_node(1);
  spec.mutable_parallelism()->set_tensor(1);
  spec.mutable_parallelism()->set_pipeline(1);
  spec.mutable_parallelism()->set_data(2);
  auto* argv = spec.mutable_trainer()->mutable_command()->mutable_argv();
  argv->Add(std::filesystem::absolute("agent/testing/test_worker").string());
  argv->Add("--steps=3");
  argv->Add("--step_seconds=0.01");
  spec.mutable_trainer()->set_steps(3);
  spec.mutable_restart()->set_max_restarts(0);
  return spec;
}

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

struct RawAnswer {
  grpc::Status status;
  std::string body;
};

class PoisonInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = TestTempDir() + "/cluster";
    std::filesystem::create_directories(dir);
    // What a coordinator from before the fix stored for a submission like the attack's.
    {
      auto store = coordinator::JobStore::Open(dir + "/state.db");
      ASSERT_TRUE(store.ok()) << store.status();
      v1::JobStatus job;
      job.set_job_id(kStoredPoisonId);
      job.set_state(v1::JOB_STATE_SUCCEEDED);
      job.set_owner("anonymous");
      job.set_generation(1);
      job.set_submit_time_unix_nanos(absl::ToUnixNanos(absl::Now() - absl::Minutes(2)));
      job.set_end_time_unix_nanos(absl::ToUnixNanos(absl::Now() - absl::Minutes(1)));
      v1::JobStatus poisoned;
      ASSERT_TRUE(poisoned.ParseFromString(
          job.SerializeAsString() +
          LengthDelimited(v1::JobStatus::kSpecFieldNumber,
                          WithNestedUnknownGroups(QuickSpec("old-poison"), 98))));
      ASSERT_TRUE((*store)->PutJob(poisoned).ok());
    }
    TestClusterOptions options;
    options.agents = 2;
    options.slots = 2;
    auto cluster = TestCluster::Start(dir, options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(cluster_, nullptr);
    channel_ = MakeChannel(cluster_->coordinator().address(), grpc::InsecureChannelCredentials());
  }

  // Calls unary JobService method `method` with `request` as is.
  RawAnswer RawUnary(const std::string& method, const std::string& request) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    grpc::ByteBuffer in = Buffer(request), out;
    absl::Notification done;
    RawAnswer answer;
    stub.UnaryCall(&context, "/ringmaster.v1.JobService/" + method, grpc::StubOptions(), &in,
                   &out, [&](grpc::Status s) {
                     answer.status = s;
                     done.Notify();
                   });
    done.WaitForNotification();  // bounded by the deadline
    std::vector<grpc::Slice> slices;
    if (answer.status.ok() && out.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) answer.body.append(s.begin(), s.end());
    }
    return answer;
  }

  // Calls server-streaming JobService method `method` with `request` as is; its final status.
  grpc::Status RawServerStream(const std::string& method, const std::string& request) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    grpc::CompletionQueue cq;
    auto await = [&] {
      void* tag;
      bool ok;
      return cq.Next(&tag, &ok) && ok;
    };
    auto call =
        stub.PrepareCall(&context, "/ringmaster.v1.JobService/" + method, &cq);
    call->StartCall(nullptr);
    await();
    call->WriteLast(Buffer(request), grpc::WriteOptions(), nullptr);
    await();
    grpc::ByteBuffer reply;
    call->Read(&reply, nullptr);
    await();
    grpc::Status status;
    call->Finish(&status, nullptr);
    await();
    return status;
  }

  // Both agents registered and alive.
  bool BothAgentsAlive() {
    auto stub = v1::JobService::NewStub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ListNodesResponse nodes;
    if (!stub->ListNodes(&context, v1::ListNodesRequest(), &nodes).ok()) return false;
    int alive = 0;
    for (const v1::NodeStatus& n : nodes.nodes()) alive += n.alive() ? 1 : 0;
    return alive == 2;
  }

  // A normal job runs to SUCCEEDED on both agents.
  void ExpectANormalJobRunsOnBothAgents(const std::string& name) {
    const std::string path = absl::StrCat(cluster_->dir(), "/", name, ".yaml");
    std::ofstream(path) << "name: " << name << "\nnodes: 2\ndevices_per_node: 2\n"
                        << "parallelism: {tensor: 1, pipeline: 1, data: 4}\n"
                        << "trainer:\n  command: [\""
                        << std::filesystem::absolute("agent/testing/test_worker").string()
                        << "\", \"--steps=3\", \"--step_seconds=0.01\"]\n  steps: 3\n"
                        << "restart: {max_restarts: 0}\n";
    CommandResult run = cluster_->Ctl({"submit", "-f", path, "--wait"});
    EXPECT_EQ(run.exit_code, 0) << run.output << cluster_->agent(0).Log();
    EXPECT_THAT(run.output, HasSubstr("placed 4 ranks on 2 nodes"));
    EXPECT_THAT(run.output, HasSubstr("SUCCEEDED"));
  }

  static TestCluster* cluster_;
  std::shared_ptr<grpc::Channel> channel_;
};

TestCluster* PoisonInputTest::cluster_ = nullptr;

TEST_F(PoisonInputTest, NestedUnknownFieldsAreRefusedOrDroppedAndPoisonNothing) {
  // The attack: 99 levels inside an otherwise valid, runnable spec.
  const std::string attack = LengthDelimited(
      v1::SubmitJobRequest::kSpecFieldNumber, WithNestedUnknownGroups(QuickSpec("poison"), 99));
  RawAnswer deep = RawUnary("SubmitJob", attack);
  std::string deep_job;
  if (deep.status.ok()) {  // accepted: only if its unknown fields were dropped
    v1::SubmitJobResponse response;
    ASSERT_TRUE(response.ParseFromString(deep.body));
    deep_job = response.job().job_id();
  } else {
    EXPECT_EQ(deep.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(deep.status.error_message(), HasSubstr("ringmaster.v1.SubmitJobRequest"));
  }
  // A few levels are accepted without them, and the job runs on both agents.
  RawAnswer shallow = RawUnary(
      "SubmitJob", LengthDelimited(v1::SubmitJobRequest::kSpecFieldNumber,
                                   WithNestedUnknownGroups(QuickSpec("shallow"), 10)));
  ASSERT_TRUE(shallow.status.ok()) << shallow.status.error_message();
  v1::SubmitJobResponse accepted;
  ASSERT_TRUE(accepted.ParseFromString(shallow.body));
  v1::JobSpec spec = accepted.job().spec();  // as the coordinator keeps it, defaults filled in
  spec.DiscardUnknownFields();
  EXPECT_EQ(spec.SerializeAsString(), accepted.job().spec().SerializeAsString());
  EXPECT_EQ(spec.trainer().command().argv(1), "--steps=3");
  EXPECT_EQ(cluster_->WaitForEnd(accepted.job().job_id(), absl::Seconds(60)), "SUCCEEDED")
      << cluster_->Ctl({"describe", "job", accepted.job().job_id()}).output;
  if (!deep_job.empty()) {
    EXPECT_EQ(cluster_->WaitForEnd(deep_job, absl::Seconds(60)), "SUCCEEDED");
  }

  // Nothing is poisoned: listing, getting and describing jobs work, ...
  CommandResult jobs = cluster_->Ctl({"get", "jobs"});
  EXPECT_EQ(jobs.exit_code, 0) << jobs.output;
  EXPECT_THAT(jobs.output, HasSubstr(accepted.job().job_id()));
  CommandResult described = cluster_->Ctl({"describe", "job", accepted.job().job_id()});
  EXPECT_EQ(described.exit_code, 0) << described.output;
  // ... a normal job runs on both agents, and both stay registered and alive.
  ExpectANormalJobRunsOnBothAgents("after-poison");
  EXPECT_TRUE(BothAgentsAlive());
  for (int i = 0; i < cluster_->agent_count(); ++i) {
    EXPECT_THAT(cluster_->agent(i).Log(), ::testing::Not(HasSubstr("could not be parsed")));
  }
}

TEST_F(PoisonInputTest, AJobStoredWithNestedUnknownFieldsIsSanitizedOnRecovery) {
  CommandResult jobs = cluster_->Ctl({"get", "jobs"});
  EXPECT_EQ(jobs.exit_code, 0) << jobs.output;
  EXPECT_THAT(jobs.output, HasSubstr(kStoredPoisonId)) << cluster_->coordinator().process.Log();
  CommandResult described = cluster_->Ctl({"describe", "job", kStoredPoisonId});
  EXPECT_EQ(described.exit_code, 0) << described.output;
  EXPECT_THAT(described.output, HasSubstr("bytes of unknown fields"));
  EXPECT_TRUE(BothAgentsAlive());
}

TEST_F(PoisonInputTest, GarbageBytesGetInvalidArgumentWithAMessageOnEveryMethod) {
  const std::string garbage("\x0a\xff\x7f\x01\x02", 5);  // a field longer than what follows
  for (const char* method : {"SubmitJob", "GetJob", "ListJobs", "CancelJob", "PlanJob",
                             "ListNodes", "UpdateNode", "CheckLinks"}) {
    RawAnswer answer = RawUnary(method, garbage);
    EXPECT_EQ(answer.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_THAT(answer.status.error_message(), HasSubstr("request: not a valid ringmaster.v1."))
        << method;
  }
  for (const char* method : {"WatchJob", "ReadLogs"}) {
    grpc::Status status = RawServerStream(method, garbage);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_THAT(status.error_message(), HasSubstr("request: not a valid ringmaster.v1."))
        << method;
  }
  EXPECT_TRUE(BothAgentsAlive());
}

TEST_F(PoisonInputTest, ASpecOver64KiBAsJsonIsRefusedNamingTheLimit) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = QuickSpec("too-big");
  (*request.mutable_spec()->mutable_trainer()->mutable_env())["BLOB"] = std::string(70000, 'x');
  for (const char* method : {"SubmitJob", "PlanJob"}) {
    RawAnswer answer = RawUnary(method, request.SerializeAsString());
    EXPECT_EQ(answer.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_THAT(answer.status.error_message(),
                HasSubstr("spec: must be at most 65536 bytes (64 KiB) as JSON"))
        << method;
  }
}

}  // namespace
}  // namespace ringmaster::testing
