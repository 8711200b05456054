// The worker API's refusals, called as another local process would: one that does not hold a
// worker's token learns nothing of the node's jobs, generations or ranks.
#include "agent/worker_service.h"

#include <string>

#include "agent/worker_supervisor.h"
#include "common/clock.h"
#include "common/metrics/registry.h"
#include "common/testing/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class WorkerServiceTest : public ::testing::Test {
 protected:
  WorkerServiceTest() {
    NodeAgentOptions options;
    options.node_name = "node-a";
    options.work_dir = ringmaster::testing::TestTempDir();
    agent_ = std::make_unique<NodeAgent>(options, &metrics_, &watchdog_, Clock::Real(),
                                         WorkerSupervisorFactory());
    service_ = std::make_unique<WorkerService>(agent_.get(), &metrics_, &watchdog_);
  }

  metrics::Registry registry_;
  RankMetrics metrics_{&registry_, Clock::Real(), absl::Seconds(1)};
  LocalWatchdog watchdog_{Clock::Real(), WatchdogOptions()};
  std::unique_ptr<NodeAgent> agent_;
  std::unique_ptr<WorkerService> service_;
};

TEST_F(WorkerServiceTest, AStrangerLearnsNothingOfTheNodesJobs) {
  for (const std::string& token : {std::string(""), std::string("guessed-token")}) {
    grpc::ServerContext context;
    v1::ReportStepRequest request;
    request.mutable_worker()->set_job_id("secret-job-7f3a");
    request.mutable_worker()->set_generation(4242);
    request.mutable_worker()->set_rank(17);
    request.mutable_worker()->set_token(token);
    request.set_step(1);
    v1::ReportResponse response;
    const grpc::Status status = service_->ReportStep(&context, &request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << token;
    EXPECT_THAT(status.error_message(), HasSubstr("worker.token: "));
    EXPECT_THAT(status.error_message(), Not(HasSubstr("secret-job-7f3a")));
    EXPECT_THAT(status.error_message(), Not(HasSubstr("4242")));
    EXPECT_THAT(status.error_message(), Not(HasSubstr("17")));
    EXPECT_THAT(status.error_message(), Not(HasSubstr("generation")));
    EXPECT_THAT(status.error_message(), Not(HasSubstr("rank")));
  }
  // The same for a rendezvous call, which would otherwise be proxied.
  grpc::ServerContext context;
  v1::RendezvousGetRequest get;
  get.mutable_worker()->set_job_id("secret-job-7f3a");
  get.mutable_worker()->set_generation(4242);
  get.set_key("k");
  v1::RendezvousGetResponse value;
  const grpc::Status status = service_->RendezvousGet(&context, &get, &value);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), Not(HasSubstr("secret-job-7f3a")));
}

}  // namespace
}  // namespace ringmaster::agent
