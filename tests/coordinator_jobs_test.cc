// The coordinator and ringctl as real processes on loopback: submit, refuse bad specs and bad
// files, plan, get, describe, watch, cancel (owner/admin only), environment values and logs
// (owner/admin only), node changes (admin only), authentication, idempotent submission, and a
// SIGKILL + restart that loses nothing.
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "common/grpc_client.h"
#include "common/testing/wait.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/ringmaster/v1/coordinator.grpc.pb.h"
#include "tests/local_cluster.h"

namespace ringmaster::testing {
namespace {

constexpr char kAliceToken[] = "alice-token-0123456789";
constexpr char kBobToken[] = "bob-token-0123456789ab";
constexpr char kAdminToken[] = "admin-token-0123456789";

class CoordinatorJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestTempDir();
    tokens_ = dir_ + "/tokens";
    std::ofstream(tokens_) << kAliceToken << " alice\n"
                           << kBobToken << " bob\n"
                           << kAdminToken << " ops admin\n";
    state_ = dir_ + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db";
    StartCoordinator_();
  }

  void StartCoordinator_() {
    auto c = StartCoordinator({"--insecure", "--tokens=" + tokens_, "--state=" + state_});
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::make_unique<CoordinatorProcess>(std::move(*c));
  }

  // Runs ringctl against the coordinator with `token` ("" for none).
  CommandResult Ctl(const std::string& token, std::vector<std::string> args) {
    std::vector<std::string> full = {"--insecure", "--coordinator=" + coordinator_->address()};
    if (!token.empty()) full.push_back("--token=" + token);
    full.insert(full.end(), args.begin(), args.end());
    auto result = RunRingctl(full);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : CommandResult{};
  }

  // Submits a job file and returns the job id.
  std::string SubmitOk(const std::string& token, const std::string& file,
                       std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"submit", "-f", file};
    args.insert(args.end(), extra.begin(), extra.end());
    CommandResult r = Ctl(token, args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::smatch m;
    std::regex re("job (\\S+) submitted");
    if (!std::regex_search(r.output, m, re)) {
      ADD_FAILURE() << r.output;
      return "";
    }
    return m[1].str();
  }

  std::string dir_, tokens_, state_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
};

TEST_F(CoordinatorJobsTest, SubmitWithoutCapacityStaysPendingWithAReason) {
  std::string id = SubmitOk(kAliceToken, "tests/testdata/small_job.yaml");
  CommandResult jobs = Ctl(kAliceToken, {"get", "jobs"});
  EXPECT_EQ(jobs.exit_code, 0) << jobs.output;
  EXPECT_NE(jobs.output.find(id), std::string::npos) << jobs.output;
  EXPECT_NE(jobs.output.find("PENDING"), std::string::npos) << jobs.output;
  EXPECT_NE(jobs.output.find("needs"), std::string::npos) << jobs.output;

  CommandResult json = Ctl(kAliceToken, {"get", "job", id, "-o", "json"});
  EXPECT_EQ(json.exit_code, 0) << json.output;
  EXPECT_NE(json.output.find("\"job_id\": \"" + id + "\""), std::string::npos) << json.output;
  EXPECT_NE(json.output.find("\"owner\": \"alice\""), std::string::npos) << json.output;
  CommandResult yaml = Ctl(kAliceToken, {"get", "job", id, "-o", "yaml"});
  EXPECT_EQ(yaml.exit_code, 0) << yaml.output;
  EXPECT_NE(yaml.output.find("job_id: " + id), std::string::npos) << yaml.output;

  CommandResult described = Ctl(kAliceToken, {"describe", "job", id});
  EXPECT_EQ(described.exit_code, 0) << described.output;
  for (const char* part : {"Owner:        alice", "TP=1 PP=1 DP=2",
                           "reasons:", "Events:", "PENDING: submitted by alice"}) {
    EXPECT_NE(described.output.find(part), std::string::npos) << part << "\n" << described.output;
  }
}

TEST_F(CoordinatorJobsTest, BadSpecsAndFilesAreRefusedClearly) {
  CommandResult bad = Ctl(kAliceToken, {"submit", "-f", "tests/testdata/bad_layout_job.yaml"});
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  // Every problem is named with its field.
  EXPECT_NE(bad.output.find("parallelism"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("devices_per_node"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("layers"), std::string::npos) << bad.output;

  CommandResult typo = Ctl(kAliceToken, {"submit", "-f", "tests/testdata/typo_job.yaml"});
  EXPECT_EQ(typo.exit_code, 2) << typo.output;
  EXPECT_NE(typo.output.find("typo_job.yaml:6:"), std::string::npos) << typo.output;
  EXPECT_NE(typo.output.find("trainer.batch.micro_batch"), std::string::npos) << typo.output;

  CommandResult missing = Ctl(kAliceToken, {"submit", "-f", "/nonexistent.yaml"});
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("-f: cannot open /nonexistent.yaml: No such file or directory"),
            std::string::npos)
      << missing.output;
  CommandResult directory = Ctl(kAliceToken, {"submit", "-f", "/"});
  EXPECT_EQ(directory.exit_code, 2) << directory.output;
  EXPECT_NE(directory.output.find("-f: cannot read /: Is a directory"), std::string::npos)
      << directory.output;

  CommandResult none = Ctl(kAliceToken, {"get", "jobs"});
  EXPECT_EQ(none.output.find("gpt-bad"), std::string::npos) << none.output;
}

TEST_F(CoordinatorJobsTest, PlanExplainsWithoutSubmitting) {
  CommandResult plan = Ctl(kAliceToken, {"plan", "-f", "tests/testdata/small_job.yaml"});
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  for (const char* part : {"layout:            TP=1 PP=1 DP=2", "memory per device:",
                           "bubble fraction:", "bytes per step:", "would stay PENDING"}) {
    EXPECT_NE(plan.output.find(part), std::string::npos) << part << "\n" << plan.output;
  }
  EXPECT_EQ(Ctl(kAliceToken, {"get", "jobs"}).output.find("gpt-tiny"), std::string::npos);
}

TEST_F(CoordinatorJobsTest, AuthenticationIsRequired) {
  CommandResult anonymous = Ctl("", {"get", "jobs"});
  EXPECT_EQ(anonymous.exit_code, 1);
  EXPECT_NE(anonymous.output.find("missing bearer token"), std::string::npos) << anonymous.output;
  CommandResult wrong = Ctl("not-a-real-token-at-all", {"get", "jobs"});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.output.find("unknown bearer token"), std::string::npos) << wrong.output;
}

TEST_F(CoordinatorJobsTest, WatchFollowsACancelByOwnerOnly) {
  std::string id = SubmitOk(kAliceToken, "tests/testdata/small_job.yaml");
  auto watcher =
      Subprocess::Start({"ctl/ringctl", "--insecure", "--coordinator=" + coordinator_->address(),
                         std::string("--token=") + kAliceToken, "watch", id},
                        dir_ + "/watch.log");
  ASSERT_TRUE(watcher.ok());
  ASSERT_TRUE(WaitFor([&] { return watcher->Log().find("PENDING") != std::string::npos; },
                      absl::Seconds(30)))
      << watcher->Log();

  CommandResult bob = Ctl(kBobToken, {"cancel", id});
  EXPECT_EQ(bob.exit_code, 1);
  EXPECT_NE(bob.output.find("only its owner or an admin"), std::string::npos) << bob.output;

  CommandResult alice = Ctl(kAliceToken, {"cancel", id, "--reason=testing"});
  EXPECT_EQ(alice.exit_code, 0) << alice.output;
  EXPECT_NE(alice.output.find("CANCELLED"), std::string::npos) << alice.output;

  auto status = watcher->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.ok()) << watcher->Log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << watcher->Log();
  EXPECT_NE(watcher->Log().find("CANCELLED: cancelled by alice: testing"), std::string::npos)
      << watcher->Log();
  EXPECT_NE(watcher->Log().find("ended CANCELLED"), std::string::npos) << watcher->Log();

  // An admin may cancel anyone's job.
  std::string other = SubmitOk(kBobToken, "tests/testdata/small_job.yaml");
  EXPECT_EQ(Ctl(kAdminToken, {"cancel", other}).exit_code, 0);
}

// Any caller may see a job, but only its owner and admins its environment values (bob gets the
// names, the values hidden, from GetJob and ListJobs) and its logs; and bob cannot take alice's
// job as his own by submitting with her request id.
TEST_F(CoordinatorJobsTest, OnlyTheOwnerAndAdminsSeeEnvironmentValuesAndLogs) {
  const std::string id =
      SubmitOk(kAliceToken, "tests/testdata/secret_env_job.yaml", {"--request_id=alice-1"});
  constexpr char kSecret[] = "s3cr3t-wandb-key";
  for (const char* token : {kAliceToken, kAdminToken}) {
    CommandResult yaml = Ctl(token, {"get", "job", id, "-o", "yaml"});
    EXPECT_NE(yaml.output.find(kSecret), std::string::npos) << token << "\n" << yaml.output;
  }
  CommandResult bob = Ctl(kBobToken, {"get", "job", id, "-o", "yaml"});
  EXPECT_EQ(bob.exit_code, 0) << bob.output;
  EXPECT_EQ(bob.output.find(kSecret), std::string::npos) << bob.output;
  EXPECT_NE(bob.output.find("WANDB_API_KEY: \"(hidden: only the job's owner and admins see "
                            "environment values)\""),
            std::string::npos)
      << bob.output;

  auto list_as = [&](const char* token) {
    auto stub = v1::JobService::NewStub(
        MakeChannel(coordinator_->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.AddMetadata("authorization", std::string("Bearer ") + token);
    v1::ListJobsResponse response;
    const grpc::Status status = stub->ListJobs(&context, v1::ListJobsRequest(), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.jobs_size(), 1);
    return response.jobs_size() == 1 ? response.jobs(0).spec().trainer().env().at("WANDB_API_KEY")
                                     : std::string();
  };
  EXPECT_EQ(list_as(kAliceToken), kSecret);
  EXPECT_EQ(list_as(kAdminToken), kSecret);
  EXPECT_NE(list_as(kBobToken).find("hidden"), std::string::npos);

  CommandResult logs = Ctl(kBobToken, {"logs", id, "--rank=0"});
  EXPECT_EQ(logs.exit_code, 1) << logs.output;
  EXPECT_NE(logs.output.find("belongs to \"alice\"; only its owner or an admin may read its logs"),
            std::string::npos)
      << logs.output;
  // The owner passes the check and meets the next one: the job is pending, its rank 0 unplaced.
  CommandResult own = Ctl(kAliceToken, {"logs", id, "--rank=0"});
  EXPECT_EQ(own.exit_code, 1) << own.output;
  EXPECT_NE(own.output.find(absl::StrCat("job ", id, " is PENDING")), std::string::npos)
      << own.output;
  EXPECT_NE(own.output.find("has no ranks placed, so no logs yet"), std::string::npos)
      << own.output;
  // Without --rank too, the coordinator's owner check comes first.
  CommandResult every = Ctl(kBobToken, {"logs", id});
  EXPECT_EQ(every.exit_code, 1) << every.output;
  EXPECT_NE(every.output.find("only its owner or an admin may read its logs"), std::string::npos)
      << every.output;

  CommandResult taken =
      Ctl(kBobToken, {"submit", "-f", "tests/testdata/small_job.yaml", "--request_id=alice-1"});
  EXPECT_EQ(taken.exit_code, 1) << taken.output;
  EXPECT_NE(taken.output.find("request_id: \"alice-1\" already names another caller's job"),
            std::string::npos)
      << taken.output;
  EXPECT_EQ(taken.output.find(id), std::string::npos) << taken.output;
}

TEST_F(CoordinatorJobsTest, OnlyAnAdminMayChangeANode) {
  CommandResult refused = Ctl(kAliceToken, {"cordon", "node-1", "--reason=mine"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.output.find("\"alice\" may not cordon nodes"), std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("admin token"), std::string::npos) << refused.output;
  // The admin passes the permission check and meets the next one: no agent registered node-1.
  CommandResult unknown = Ctl(kAdminToken, {"drain", "node-1"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.output.find("node \"node-1\" is not known"), std::string::npos)
      << unknown.output;
}

TEST_F(CoordinatorJobsTest, RequestIdMakesSubmitIdempotent) {
  std::string a = SubmitOk(kAliceToken, "tests/testdata/small_job.yaml", {"--request_id=r-1"});
  std::string b = SubmitOk(kAliceToken, "tests/testdata/small_job.yaml", {"--request_id=r-1"});
  EXPECT_EQ(a, b);
}

TEST_F(CoordinatorJobsTest, SigkillAndRestartLosesNothing) {
  std::string pending = SubmitOk(kAliceToken, "tests/testdata/small_job.yaml");
  std::string cancelled = SubmitOk(kAliceToken, "tests/testdata/small_job.yaml");
  ASSERT_EQ(Ctl(kAliceToken, {"cancel", cancelled}).exit_code, 0);
  std::string before = Ctl(kAliceToken, {"describe", "job", cancelled}).output;

  coordinator_->process.Signal(SIGKILL);
  ASSERT_TRUE(coordinator_->process.Wait(absl::Seconds(30)).ok());
  StartCoordinator_();

  CommandResult jobs = Ctl(kAliceToken, {"get", "jobs"});
  EXPECT_NE(jobs.output.find(pending), std::string::npos) << jobs.output;
  EXPECT_NE(jobs.output.find(cancelled), std::string::npos) << jobs.output;
  CommandResult ended = Ctl(kAliceToken, {"get", "jobs", "--state=cancelled"});
  EXPECT_EQ(ended.exit_code, 0) << ended.output;
  EXPECT_NE(ended.output.find(cancelled), std::string::npos) << ended.output;
  EXPECT_EQ(ended.output.find(pending), std::string::npos) << ended.output;
  std::string after = Ctl(kAliceToken, {"describe", "job", cancelled}).output;
  // Same state and the same events (the describe text minus the ages of nothing: it has none).
  EXPECT_EQ(before, after);
  EXPECT_NE(Ctl(kAliceToken, {"get", "job", pending}).output.find("PENDING"), std::string::npos);
  // And the request id table survived too.
  std::string a = SubmitOk(kAliceToken, "tests/testdata/small_job.yaml", {"--request_id=x"});
  coordinator_->process.Signal(SIGKILL);
  ASSERT_TRUE(coordinator_->process.Wait(absl::Seconds(30)).ok());
  StartCoordinator_();
  EXPECT_EQ(SubmitOk(kAliceToken, "tests/testdata/small_job.yaml", {"--request_id=x"}), a);
}

}  // namespace
}  // namespace ringmaster::testing
