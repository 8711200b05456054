// ringctl's watch against a scripted JobService over loopback gRPC: a watch the coordinator cuts
// for falling behind (RESOURCE_EXHAUSTED) is resumed after the last event printed, and every
// event is printed once, in order; a RESOURCE_EXHAUSTED before any update is an error, not a
// loop. (The cut itself is the coordinator's, tested in tests/ with a real one.) get jobs pages
// through every job. And ringctl's channel takes responses up to the coordinator's 64 MiB, past
// gRPC's default 4 MiB.
#include "ctl/commands.h"

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <algorithm>

#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_server.h"
#include "ctl/client.h"
#include "gmock/gmock.h"
#include "grpcpp/security/server_credentials.h"
#include "gtest/gtest.h"

namespace ringmaster::ctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

v1::WatchJobResponse Event(int64_t sequence, const std::string& message,
                           v1::JobState state = v1::JOB_STATE_RUNNING) {
  v1::WatchJobResponse update;
  update.set_state(state);
  v1::JobEvent* e = update.mutable_event();
  e->set_sequence(sequence);
  e->set_kind(state == v1::JOB_STATE_RUNNING ? "placed" : "state");
  e->set_state(state);
  e->set_message(message);
  return update;
}

// Answers each WatchJob call with the next script: its updates, then its status.
class ScriptedJobs final : public v1::JobService::Service {
 public:
  struct Call {
    std::vector<v1::WatchJobResponse> updates;
    grpc::Status status;
  };
  explicit ScriptedJobs(std::vector<Call> calls) : calls_(std::move(calls)) {}

  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::WatchJobResponse>* writer) override {
    Call call;
    {
      absl::MutexLock lock(&mu_);
      afters_.push_back(request->after_sequence());
      if (next_ >= calls_.size()) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no more scripted calls");
      }
      call = calls_[next_++];
    }
    for (const v1::WatchJobResponse& u : call.updates) writer->Write(u);
    return call.status;
  }

  // A job whose spec carries `env_bytes` of environment: a response past gRPC's default 4 MiB.
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* request,
                      v1::GetJobResponse* response) override {
    if (request->job_id() == "nope") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job \"nope\"");
    }
    *response->mutable_job() = job;
    response->mutable_job()->set_job_id(request->job_id());
    (*response->mutable_job()->mutable_spec()->mutable_trainer()->mutable_env())["BIG"] =
        std::string(env_bytes, 'x');
    return grpc::Status::OK;
  }
  size_t env_bytes = 0;
  v1::JobStatus job;  // what GetJob answers (with the id asked for)

  // Rank N's log: "rank N line 1\nrank N line 2\n" in two chunks split inside a line; a rank
  // outside `job`'s assignments is refused in the coordinator's words.
  grpc::Status ReadLogs(grpc::ServerContext*, const v1::ReadLogsRequest* request,
                        grpc::ServerWriter<v1::ReadLogsResponse>* writer) override {
    if (request->rank() < 0 || request->rank() >= job.assignments_size()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("rank: must be in [0, ", job.assignments_size(), "), got ",
                                       request->rank()));
    }
    const std::string text =
        absl::StrCat("rank ", request->rank(), " line 1\nrank ", request->rank(), " line 2\n");
    v1::ReadLogsResponse chunk;
    chunk.set_data(text.substr(0, 10));
    writer->Write(chunk);
    chunk.set_data(text.substr(10));
    writer->Write(chunk);
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++cancels_;
    response->mutable_job()->set_job_id(request->job_id());
    response->mutable_job()->set_state(v1::JOB_STATE_CANCELLED);
    return grpc::Status::OK;
  }
  int cancels() {
    absl::MutexLock lock(&mu_);
    return cancels_;
  }

  // Lists jobs job-0 (newest) to job-<listed - 1>, two a page whatever the limit asked, with
  // tokens "after-job-N"; records each request.
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override {
    int first = 0;
    if (!request->page_token().empty()) {
      first = std::stoi(request->page_token().substr(std::string("after-job-").size())) + 1;
    }
    {
      absl::MutexLock lock(&mu_);
      list_requests_.push_back(*request);
    }
    for (int i = first; i < std::min(first + 2, listed); ++i) {
      v1::JobStatus* job = response->add_jobs();
      job->set_job_id(absl::StrCat("job-", i));
      job->set_state(v1::JOB_STATE_CANCELLED);
    }
    if (first + 2 < listed) response->set_next_page_token(absl::StrCat("after-job-", first + 1));
    return grpc::Status::OK;
  }
  int listed = 0;

  std::vector<v1::ListJobsRequest> list_requests() {
    absl::MutexLock lock(&mu_);
    return list_requests_;
  }

  std::vector<int64_t> afters() {
    absl::MutexLock lock(&mu_);
    return afters_;
  }

 private:
  absl::Mutex mu_;
  const std::vector<Call> calls_;
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> afters_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ListJobsRequest> list_requests_ ABSL_GUARDED_BY(mu_);
  int cancels_ ABSL_GUARDED_BY(mu_) = 0;
};

class WatchTest : public ::testing::Test {
 protected:
  void Serve(ScriptedJobs* jobs, bool insecure = true) {
    GrpcServerOptions options;
    options.address = "127.0.0.1:0";
    options.credentials = grpc::InsecureServerCredentials();
    options.services = {jobs};
    absl::StatusOr<std::unique_ptr<GrpcServer>> server = GrpcServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ClientOptions client;
    client.coordinator = "127.0.0.1:" + std::to_string(server_->port());
    client.insecure = insecure;
    client.timeout = absl::Seconds(5);
    absl::StatusOr<Client> connected = Client::Connect(client);
    ASSERT_TRUE(connected.ok()) << connected.status();
    client_ = std::make_unique<Client>(std::move(*connected));
  }
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(WatchTest, ACutWatchResumesAfterTheLastEventPrinted) {
  const grpc::Status cut(grpc::StatusCode::RESOURCE_EXHAUSTED, "this watch fell behind");
  v1::WatchJobResponse progress;
  progress.set_state(v1::JOB_STATE_RUNNING);
  v1::WatchJobResponse zero = progress;  // a generation's start: not printed
  zero.mutable_progress();
  progress.mutable_progress()->set_step(7);
  ScriptedJobs jobs({
      {{Event(1, "first"), zero, Event(2, "second"), progress, progress}, cut},
      {{Event(3, "third")}, cut},
      {{Event(4, "done", v1::JOB_STATE_SUCCEEDED)}, grpc::Status::OK},
  });
  Serve(&jobs);
  std::ostringstream out;
  ASSERT_TRUE(Watch(*client_, "job-1", out).ok()) << out.str();
  EXPECT_THAT(jobs.afters(), ElementsAre(0, 2, 3));
  const std::string text = out.str();
  EXPECT_THAT(text, Not(HasSubstr("progress  step 0 "))) << text;
  size_t at = 0;
  for (const char* line :
       {"first", "second", "progress  step 7",
        "(the coordinator ended this watch: this watch fell behind; resuming "
        "after event 2)",
        "third", "resuming after event 3", "done", "job job-1 ended SUCCEEDED"}) {
    const size_t found = text.find(line, at);
    ASSERT_NE(found, std::string::npos) << line << " in order in:\n" << text;
    EXPECT_EQ(text.find(line, found + 1), std::string::npos) << line << " twice in:\n" << text;
    at = found;
  }
}

TEST_F(WatchTest, AResumedWatchCutBeforeAnyUpdateIsAnError) {
  const grpc::Status cut(grpc::StatusCode::RESOURCE_EXHAUSTED, "this watch fell behind");
  ScriptedJobs jobs({{{Event(1, "first"), Event(2, "second")}, cut}, {{}, cut}});
  Serve(&jobs);
  std::ostringstream out;
  EXPECT_EQ(Watch(*client_, "job-1", out).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(jobs.afters(), ElementsAre(0, 2));
}

TEST_F(WatchTest, ACutBeforeAnyUpdateIsAnError) {
  ScriptedJobs jobs({{{}, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no room")},
                     {{Event(1, "never")}, grpc::Status::OK}});
  Serve(&jobs);
  std::ostringstream out;
  const absl::Status status = Watch(*client_, "job-1", out);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr("no room"));
  EXPECT_THAT(jobs.afters(), ElementsAre(0));
}

// get jobs shows every job, page after page, each once and newest first, passing the states
// asked for on every page; a state that is not one is the user's error, before any call.
TEST_F(WatchTest, GetJobsPagesThroughEveryJob) {
  ScriptedJobs jobs({});
  jobs.listed = 5;
  Serve(&jobs);
  std::ostringstream out;
  ASSERT_TRUE(GetJobs(*client_, "Cancelled, failed", out).ok()) << out.str();
  const std::vector<v1::ListJobsRequest> requests = jobs.list_requests();
  ASSERT_EQ(requests.size(), 3u);
  std::vector<std::string> tokens;
  for (const v1::ListJobsRequest& r : requests) {
    tokens.push_back(r.page_token());
    EXPECT_THAT(r.states(), ElementsAre(v1::JOB_STATE_CANCELLED, v1::JOB_STATE_FAILED));
  }
  EXPECT_THAT(tokens, ElementsAre("", "after-job-1", "after-job-3"));
  const std::string text = out.str();
  size_t at = 0;
  for (int i = 0; i < 5; ++i) {
    const std::string id = absl::StrCat("job-", i, " ");
    const size_t found = text.find(id, at);
    ASSERT_NE(found, std::string::npos) << id << " in order in:\n" << text;
    EXPECT_EQ(text.find(id, found + 1), std::string::npos) << id << " twice in:\n" << text;
    at = found;
  }

  std::ostringstream refused;
  const absl::Status bad = GetJobs(*client_, "running,done", refused);
  EXPECT_TRUE(IsInputError(bad)) << bad;
  EXPECT_THAT(bad.message(), HasSubstr("--state: \"done\" is not a job state (pending, running, "
                                       "restarting, succeeded, failed, cancelled;"));
  EXPECT_EQ(jobs.list_requests().size(), 3u) << "no call for a bad --state";
}

// ringctl receives what the coordinator may send (its limit, 64 MiB), not only gRPC's default
// 4 MiB: `describe job` of a job with many events, `get jobs` of many large jobs.
TEST_F(WatchTest, ResponsesLargerThanGrpcsDefaultLimitArrive) {
  ScriptedJobs jobs({});
  jobs.env_bytes = 6 << 20;
  Serve(&jobs);
  grpc::ClientContext context;
  v1::GetJobRequest request;
  request.set_job_id("big");
  v1::GetJobResponse response;
  const grpc::Status status = client_->jobs()->GetJob(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.job().spec().trainer().env().at("BIG").size(), size_t{6} << 20);
}

// The errors say what to do: golden messages.
TEST_F(WatchTest, ErrorsSayWhatToDo) {
  ScriptedJobs jobs({});
  jobs.job.set_state(v1::JOB_STATE_PENDING);
  jobs.job.set_reason("needs 4 devices, 2 free");
  Serve(&jobs);
  std::ostringstream out;
  for (int rank : {-1, 0}) {
    EXPECT_EQ(Logs(*client_, "job-1", rank, false, out).message(),
              "job job-1 is PENDING (needs 4 devices, 2 free) and has no ranks placed, so no logs "
              "yet: `ringctl watch job-1` shows when its ranks start");
  }
  EXPECT_EQ(Describe(*client_, "job-1", out).ok(), true);
  EXPECT_THAT(out.str(), HasSubstr("Ranks:        none running yet (PENDING: needs 4 devices, 2 "
                                   "free); `ringctl watch job-1` shows when they start\n"));
  EXPECT_EQ(GetJob(*client_, "nope", "table", out).message(),
            "no job \"nope\": `ringctl get jobs` lists the jobs you may see");

  jobs.job.set_state(v1::JOB_STATE_SUCCEEDED);
  jobs.job.add_assignments()->set_node("agent-0");
  EXPECT_EQ(Logs(*client_, "job-1", 1, false, out).message(),
            "--rank: job job-1 has ranks 0 to 0, got 1 (leave --rank out for every rank)");
  EXPECT_EQ(Cancel(*client_, "job-1", "", out).message(),
            "job job-1 already ended SUCCEEDED: there is nothing to cancel (`ringctl describe "
            "job job-1` shows how it ended)");
  jobs.job.set_state(v1::JOB_STATE_CANCELLED);
  jobs.job.set_reason("cancelled by alice");
  std::ostringstream cancelled;
  EXPECT_TRUE(Cancel(*client_, "job-1", "", cancelled).ok());
  EXPECT_EQ(cancelled.str(), "job job-1 was already CANCELLED (cancelled by alice)\n");
  EXPECT_EQ(jobs.cancels(), 0) << "an ended job is not cancelled again";
  jobs.job.set_state(v1::JOB_STATE_RUNNING);
  EXPECT_TRUE(Cancel(*client_, "job-1", "", cancelled).ok());
  EXPECT_EQ(jobs.cancels(), 1);
  EXPECT_TRUE(IsInputError(GetJob(*client_, "job-1", "xml", out)));
}

// ringctl speaking TLS to a plaintext coordinator says to pass --insecure.
TEST_F(WatchTest, TlsAgainstAPlaintextCoordinatorSaysToPassInsecure) {
  ScriptedJobs jobs({});
  Serve(&jobs, /*insecure=*/false);
  std::ostringstream out;
  const absl::Status status = GetJob(*client_, "job-1", "table", out);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(),
              HasSubstr(". The coordinator speaks plaintext, not TLS (a local cluster from "
                        "tools/cluster?): pass --insecure or set RINGMASTER_INSECURE=1"));
}

// Without --rank, every rank's lines, each prefixed; with --rank, that rank's bytes as they are.
TEST_F(WatchTest, LogsOfEveryRankArePrefixed) {
  ScriptedJobs jobs({});
  jobs.job.set_state(v1::JOB_STATE_RUNNING);
  jobs.job.add_assignments()->set_rank(0);
  jobs.job.add_assignments()->set_rank(1);
  Serve(&jobs);
  for (bool follow : {false, true}) {
    std::ostringstream out;
    ASSERT_TRUE(Logs(*client_, "job-1", -1, follow, out).ok());
    std::vector<std::string> lines = absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
    std::sort(lines.begin(), lines.end());
    EXPECT_THAT(lines, ElementsAre("[rank 0] rank 0 line 1", "[rank 0] rank 0 line 2",
                                   "[rank 1] rank 1 line 1", "[rank 1] rank 1 line 2"))
        << out.str();
  }
  std::ostringstream one;
  ASSERT_TRUE(Logs(*client_, "job-1", 1, false, one).ok());
  EXPECT_EQ(one.str(), "rank 1 line 1\nrank 1 line 2\n");
}

// -o json keeps zeros (rank 0, restarts 0); -o yaml is block style; -o wide adds its columns.
TEST_F(WatchTest, OutputFormats) {
  ScriptedJobs jobs({});
  jobs.job.set_state(v1::JOB_STATE_RUNNING);
  jobs.job.mutable_spec()->set_nodes(1);
  jobs.job.mutable_spec()->set_devices_per_node(2);
  jobs.job.add_assignments()->set_node("agent-0");
  Serve(&jobs);
  std::ostringstream json, yaml, wide;
  ASSERT_TRUE(GetJob(*client_, "job-1", "json", json).ok());
  EXPECT_THAT(json.str(), HasSubstr("\"rank\": 0,"));
  EXPECT_THAT(json.str(), HasSubstr("\"restarts\": 0,"));
  ASSERT_TRUE(GetJob(*client_, "job-1", "yaml", yaml).ok());
  EXPECT_THAT(yaml.str(), HasSubstr("\n  job_id: job-1\n"));
  EXPECT_THAT(yaml.str(), HasSubstr("\n    - rank: 0\n      node: agent-0\n"));
  ASSERT_TRUE(GetJob(*client_, "job-1", "wide", wide).ok());
  EXPECT_THAT(wide.str(), HasSubstr("ID     NAME  STATE    GEN  RESTARTS  STEP  AGE"));
  EXPECT_THAT(wide.str(), HasSubstr("OWNER  NODES    DEVICES  LAYOUT  LOSS  TOKENS/S  REASON"));
  EXPECT_THAT(wide.str(), HasSubstr("-      agent-0  1x2      -       -     -"));
}

}  // namespace
}  // namespace ringmaster::ctl
