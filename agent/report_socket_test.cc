// The report datagram socket with a real Unix socket: datagrams sent as the Python watch sends
// them reach the worker service (its metrics and watchdog), and garbage, oversized, wrong-token
// and invalid ones are refused, counted by reason, and leave the reader serving.
#include "agent/report_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <csignal>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "agent/worker_service.h"
#include "common/clock.h"
#include "common/metrics/registry.h"
#include "common/testing/series_value.h"
#include "common/testing/subprocess.h"
#include "common/testing/wait.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

using ::testing::HasSubstr;
using ringmaster::testing::SeriesValue;
using ringmaster::testing::WaitFor;

constexpr absl::Duration kWait = absl::Seconds(20);

// Launches nothing: records each spec, so the test can read a worker's token and environment.
class RecordingLauncher : public WorkerLauncher {
 public:
  explicit RecordingLauncher(ExitCallback on_exit) : on_exit_(std::move(on_exit)) {}

  absl::StatusOr<pid_t> Launch(const LaunchSpec& spec) override {
    absl::MutexLock lock(&mu_);
    specs_.push_back(spec);
    const pid_t pid = static_cast<pid_t>(1000 + specs_.size());
    running_.insert(pid);
    return pid;
  }
  absl::Status Stop(pid_t pid, absl::Duration, absl::Duration) override {
    {
      absl::MutexLock lock(&mu_);
      if (running_.erase(pid) == 0) return absl::NotFoundError("no such worker");
    }
    on_exit_(pid, ExitInfo{-1, SIGTERM, "", /*stopped=*/true});
    return absl::OkStatus();
  }
  std::vector<pid_t> Running() const override {
    absl::MutexLock lock(&mu_);
    return std::vector<pid_t>(running_.begin(), running_.end());
  }
  std::vector<LaunchSpec> specs() const {
    absl::MutexLock lock(&mu_);
    return specs_;
  }

 private:
  const ExitCallback on_exit_;
  mutable absl::Mutex mu_;
  std::vector<LaunchSpec> specs_ ABSL_GUARDED_BY(mu_);
  std::set<pid_t> running_ ABSL_GUARDED_BY(mu_);
};

// A directory for the sockets: TEST_TMPDIR when its paths fit a Unix socket, else a short one
// under /tmp (removed by the destructor).
class SocketDir {
 public:
  SocketDir() {
    dir_ = ringmaster::testing::FreshTestCaseDir();
    if (dir_.size() + 32 > sizeof(sockaddr_un::sun_path)) {
      char pattern[] = "/tmp/rm-report-XXXXXX";
      if (mkdtemp(pattern) != nullptr) {
        dir_ = pattern;
        owned_ = true;
      }
    }
  }
  ~SocketDir() {
    std::error_code ec;
    if (owned_) std::filesystem::remove_all(dir_, ec);
  }
  const std::string& path() const { return dir_; }

 private:
  std::string dir_;
  bool owned_ = false;
};

class ReportSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    NodeAgentOptions options;
    options.node_name = "node-a";
    options.work_dir = ringmaster::testing::FreshTestCaseDir();
    options.system_root = options.work_dir + "/no-system";
    options.socket_path = dir_.path() + "/agent.sock";
    options.report_socket_path = ReportSocketPath(options.socket_path);
    agent_ = std::make_unique<NodeAgent>(
        options, &metrics_, &watchdog_, Clock::Real(),
        [this](WorkerLauncher::ExitCallback on_exit) -> std::unique_ptr<WorkerLauncher> {
          auto launcher = std::make_unique<RecordingLauncher>(std::move(on_exit));
          launcher_ = launcher.get();
          return launcher;
        });
    service_ = std::make_unique<WorkerService>(agent_.get(), &metrics_, &watchdog_);
    auto socket = ReportSocket::Start(
        options.report_socket_path,
        [this](const v1::WorkerReport& report) { return service_->HandleReport(report); },
        &registry_);
    ASSERT_TRUE(socket.ok()) << socket.status();
    socket_ = *std::move(socket);

    // Rank 1 of a Python command job runs here.
    v1::CoordinatorMessage m;
    v1::LaunchWorkers* launch = m.mutable_launch();
    launch->mutable_job()->set_job_id("job-0001");
    launch->mutable_job()->set_generation(2);
    launch->mutable_spec()->mutable_trainer()->mutable_command()->add_argv("python3");
    launch->set_world_size(2);
    v1::RankAssignment* a = launch->add_assignments();
    a->set_rank(1);
    agent_->OnCommand(m);
    ASSERT_TRUE(WaitFor([this] { return !launcher_->specs().empty(); }, kWait));
    env_ = launcher_->specs().front().env;

    sender_ = UniqueFd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ASSERT_TRUE(sender_.valid());
  }

  void TearDown() override {
    if (socket_ != nullptr) socket_->Stop();
    agent_.reset();
  }

  // Sends `datagram` to the socket the worker was told of; whether the kernel took it.
  bool Send(const std::string& datagram) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string& path = env_["RINGMASTER_REPORT_SOCKET"];
    std::memcpy(addr.sun_path, path.data(), std::min(path.size(), sizeof(addr.sun_path) - 1));
    return sendto(sender_.get(), datagram.data(), datagram.size(), 0,
                  reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) ==
           static_cast<ssize_t>(datagram.size());
  }

  // The JSON of a step report of the launched worker, as the Python watch writes it.
  std::string StepJson(int step, const std::string& token) {
    return absl::StrCat(R"({"step": {"worker": {"jobId": "job-0001", "generation": "2", "rank": 1,
                        "token": ")",
                        token, R"("}, "step": ")", step,
                        R"(", "stepSeconds": 0.25, "computeSeconds": 0.2, "commSeconds": 0.05,
                        "collectiveEntered": {"world": "41"},
                        "collectiveCompleted": {"world": "41"}, "futureField": [1, {"x": 2}]}})");
  }

  double Refused(const std::string& reason) {
    return SeriesValue(registry_.RenderText(),
                       absl::StrCat("ringmaster_agent_worker_reports_refused_total{reason=\"",
                                    reason, "\"}"));
  }
  bool AwaitRefused(const std::string& reason, double count) {
    return WaitFor([&] { return Refused(reason) == count; }, kWait);
  }
  bool AwaitAccepted(int64_t count) {
    return WaitFor([&] { return socket_->accepted() == count; }, kWait);
  }

  SocketDir dir_;
  metrics::Registry registry_;
  RankMetrics metrics_{&registry_, Clock::Real(), absl::Seconds(1)};
  LocalWatchdog watchdog_{Clock::Real(), WatchdogOptions()};
  RecordingLauncher* launcher_ = nullptr;
  std::unique_ptr<NodeAgent> agent_;
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<ReportSocket> socket_;
  std::map<std::string, std::string> env_;
  UniqueFd sender_;
};

TEST_F(ReportSocketTest, AStepDatagramReachesTheMetricsAndWatchdog) {
  EXPECT_EQ(env_["RINGMASTER_REPORT_SOCKET"], dir_.path() + "/agent-report.sock");
  ASSERT_TRUE(Send(StepJson(10, env_["RINGMASTER_WORKER_TOKEN"])));
  ASSERT_TRUE(AwaitAccepted(1));
  const std::string page = registry_.RenderText();
  EXPECT_EQ(SeriesValue(page, R"(ringmaster_step{job_id="job-0001",rank="1"})"), 10) << page;
  EXPECT_EQ(SeriesValue(page, R"(ringmaster_compute_seconds{job_id="job-0001",rank="1"})"), 0.2);
  EXPECT_EQ(SeriesValue(page, R"(ringmaster_collective_sequence{job_id="job-0001",rank="1",)"
                              R"(group="world",kind="entered"})"),
            41);
  // A command job's rank is watched from its first report: this one.
  EXPECT_NE(watchdog_.Allowance("job-0001", 1), absl::InfiniteDuration());
  for (const char* reason : {"size", "parse", "identity", "invalid"}) {
    EXPECT_EQ(Refused(reason), 0) << reason;
  }

  // A phase and the collectives a waiting rank sends, in the same JSON form.
  const std::string worker = absl::StrCat(
      R"("worker": {"jobId": "job-0001", "generation": "2", "rank": 1, "token": ")",
      env_["RINGMASTER_WORKER_TOKEN"], R"("})");
  ASSERT_TRUE(Send(absl::StrCat(R"({"phase": {)", worker, R"(, "phase": "WORKER_PHASE_CHECKPOINT"}})")));
  ASSERT_TRUE(Send(absl::StrCat(R"({"collectives": {)", worker,
                                R"(, "collectiveEntered": {"world": "42"}}})")));
  ASSERT_TRUE(AwaitAccepted(3));
  const std::string after = registry_.RenderText();
  EXPECT_EQ(SeriesValue(after, R"(ringmaster_worker_phase{job_id="job-0001",rank="1",)"
                               R"(phase="checkpoint"})"),
            1);
  EXPECT_EQ(SeriesValue(after, R"(ringmaster_collective_sequence{job_id="job-0001",rank="1",)"
                               R"(group="world",kind="entered"})"),
            42);
  EXPECT_EQ(watchdog_.Allowance("job-0001", 1), WatchdogOptions().checkpoint_timeout);
}

// Before its first step, a command rank's collectives datagram saying it is blocked in one puts
// it under the init allowance (agent/local_watchdog.h); one saying it is not takes it off again.
TEST_F(ReportSocketTest, ABlockedCollectivesDatagramBeforeTheFirstStepIsWatched) {
  const std::string worker = absl::StrCat(
      R"("worker": {"jobId": "job-0001", "generation": "2", "rank": 1, "token": ")",
      env_["RINGMASTER_WORKER_TOKEN"], R"("})");
  ASSERT_EQ(watchdog_.Allowance("job-0001", 1), absl::InfiniteDuration());
  ASSERT_TRUE(Send(absl::StrCat(R"({"collectives": {)", worker,
                                R"(, "collectiveEntered": {"world": "3"},)",
                                R"( "collectiveCompleted": {"world": "2"}, "blocked": true}})")));
  ASSERT_TRUE(AwaitAccepted(1));
  EXPECT_EQ(watchdog_.Allowance("job-0001", 1), WatchdogOptions().init_timeout);
  ASSERT_TRUE(Send(absl::StrCat(R"({"collectives": {)", worker,
                                R"(, "collectiveEntered": {"world": "3"},)",
                                R"( "collectiveCompleted": {"world": "3"}, "blocked": false}})")));
  ASSERT_TRUE(AwaitAccepted(2));
  EXPECT_EQ(watchdog_.Allowance("job-0001", 1), absl::InfiniteDuration());
}

// The Python watch's batch: several steps in one datagram, each taken in order as its own report;
// a refused one is the datagram's refusal (counted once) and does not stop the ones after it.
TEST_F(ReportSocketTest, AStepsDatagramIsEachStepInOrder) {
  const std::string token = env_["RINGMASTER_WORKER_TOKEN"];
  auto batch = [this](const std::vector<std::string>& steps) {
    std::vector<std::string> bodies;
    for (const std::string& step : steps) {
      bodies.push_back(step.substr(std::string(R"({"step": )").size(),
                                   step.size() - std::string(R"({"step": )").size() - 1));
    }
    return absl::StrCat(R"({"steps": {"steps": [)", absl::StrJoin(bodies, ", "), "]}}");
  };
  ASSERT_TRUE(Send(batch({StepJson(7, token), StepJson(8, token), StepJson(9, token)})));
  ASSERT_TRUE(AwaitAccepted(1));
  const std::string page = registry_.RenderText();
  EXPECT_EQ(SeriesValue(page, R"(ringmaster_step{job_id="job-0001",rank="1"})"), 9) << page;
  // The step time histogram saw all three (0.25 s each).
  EXPECT_EQ(SeriesValue(page, R"(ringmaster_step_seconds_count{job_id="job-0001",rank="1"})"), 3)
      << page;

  ASSERT_TRUE(Send(batch({StepJson(0, token), StepJson(10, token)})));  // 0: steps count from 1
  ASSERT_TRUE(AwaitRefused("invalid", 1));
  EXPECT_EQ(SeriesValue(registry_.RenderText(), R"(ringmaster_step{job_id="job-0001",rank="1"})"),
            10);
  ASSERT_TRUE(Send(R"({"steps": {"steps": []}})"));
  ASSERT_TRUE(AwaitRefused("invalid", 2));
  EXPECT_EQ(socket_->accepted(), 1);
}

TEST_F(ReportSocketTest, RefusalsAreCountedByReasonAndTheReaderSurvives) {
  const std::string token = env_["RINGMASTER_WORKER_TOKEN"];
  ASSERT_TRUE(Send("this is not json"));
  ASSERT_TRUE(AwaitRefused("parse", 1));
  ASSERT_TRUE(Send(std::string("{\"step\": {\"worker\": {\"jobId\": \"\xff\xfe\"}}}")));
  ASSERT_TRUE(AwaitRefused("parse", 2));  // not UTF-8
  ASSERT_TRUE(Send(std::string(40, '[') + std::string(40, ']')));
  ASSERT_TRUE(AwaitRefused("parse", 3));  // nested deeper than proto_edge allows
  ASSERT_TRUE(Send("{}"));                // a report of nothing
  ASSERT_TRUE(AwaitRefused("invalid", 1));
  // Larger than 64 KiB (still a well-formed report, padded with an unknown field).
  const std::string big = absl::StrCat(R"({"pad": ")", std::string(70000, 'x'), R"(", )",
                                       StepJson(3, token).substr(1));
  ASSERT_TRUE(Send(big));
  ASSERT_TRUE(AwaitRefused("size", 1));
  ASSERT_TRUE(Send(StepJson(4, "not-the-token")));
  ASSERT_TRUE(AwaitRefused("identity", 1));
  ASSERT_TRUE(Send(StepJson(4, "")));
  ASSERT_TRUE(AwaitRefused("identity", 2));
  ASSERT_TRUE(Send(StepJson(0, token)));  // steps count from 1
  ASSERT_TRUE(AwaitRefused("invalid", 2));
  EXPECT_EQ(socket_->accepted(), 0);
  EXPECT_TRUE(std::isnan(SeriesValue(registry_.RenderText(),
                                     R"(ringmaster_step{job_id="job-0001",rank="1"})")));

  // Still serving: the worker's own report goes through.
  ASSERT_TRUE(Send(StepJson(5, token)));
  ASSERT_TRUE(AwaitAccepted(1));
  EXPECT_EQ(SeriesValue(registry_.RenderText(), R"(ringmaster_step{job_id="job-0001",rank="1"})"),
            5);
}

TEST_F(ReportSocketTest, StopRemovesTheSocketFile) {
  const std::string path = socket_->path();
  EXPECT_TRUE(std::filesystem::exists(path));
  socket_->Stop();
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(Send(StepJson(1, env_["RINGMASTER_WORKER_TOKEN"])));  // nobody listens
  socket_->Stop();  // idempotent
}

TEST(ReportSocketPathTest, BesideTheWorkerSocket) {
  EXPECT_EQ(ReportSocketPath("/run/rm/agent.sock"), "/run/rm/agent-report.sock");
  EXPECT_EQ(ReportSocketPath("/run/rm/worker"), "/run/rm/worker-report");
}

TEST(ParseReportDatagramTest, NamesTheRule) {
  EXPECT_THAT(ParseReportDatagram("[").status().message(),
              HasSubstr("report: not the JSON of a ringmaster.v1.WorkerReport"));
  EXPECT_EQ(ParseReportDatagram(std::string(kMaxReportDatagramBytes + 1, ' ')).status().message(),
            "report: must be at most 65536 bytes, got 65537");
  EXPECT_EQ(ParseReportDatagram(std::string(33, '{')).status().message(),
            "report: must nest at most 32 levels of JSON objects and arrays");
  // Brackets inside strings are no nesting.
  absl::StatusOr<v1::WorkerReport> report = ParseReportDatagram(
      absl::StrCat(R"({"exit": {"exitCode": 75, "reason": ")", std::string(40, '['), R"("}})"));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->exit().exit_code(), 75);
}

TEST(ReportSocketStartTest, APathTooLongForAUnixSocketNamesTheFlag) {
  metrics::Registry registry;
  auto socket = ReportSocket::Start("/tmp/" + std::string(120, 'x'),
                                    [](const v1::WorkerReport&) { return absl::OkStatus(); },
                                    &registry);
  EXPECT_EQ(socket.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(socket.status().message(), HasSubstr("--worker_socket"));
}

}  // namespace
}  // namespace ringmaster::agent
