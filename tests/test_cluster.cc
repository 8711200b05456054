#include "tests/test_cluster.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/testing/wait.h"
#include "gtest/gtest.h"

namespace ringmaster::testing {

std::string TestCluster::Runfile(const std::string& path) {
  return std::filesystem::absolute(path).string();
}

absl::StatusOr<std::unique_ptr<TestCluster>> TestCluster::Start(
    const std::string& dir, const TestClusterOptions& options) {
  std::unique_ptr<TestCluster> c(new TestCluster());
  c->dir_ = dir;
  std::filesystem::create_directories(dir);
  c->state_ = dir + "/state.db";
  c->coordinator_flags_ = {"--insecure", "--state=" + c->state_, "--stop_grace=2"};
  c->coordinator_flags_.insert(c->coordinator_flags_.end(), options.coordinator_flags.begin(),
                               options.coordinator_flags.end());
  auto coordinator = StartCoordinator(c->coordinator_flags_);
  if (!coordinator.ok()) return coordinator.status();
  c->coordinator_ = std::make_unique<CoordinatorProcess>(std::move(*coordinator));
  // Unix socket paths must be short (107 bytes); Bazel's temp dir is not.
  char short_dir[] = "/tmp/rm-sock-XXXXXX";
  if (mkdtemp(short_dir) == nullptr) return absl::InternalError("mkdtemp");
  c->socket_dir_ = short_dir;
  for (int i = 0; i < options.agents; ++i) {
    const std::string work = absl::StrCat(dir, "/agent-", i);
    std::vector<std::string> argv = {
        "agent/agent",
        "--insecure",
        "--coordinator=" + c->coordinator_->address(),
        absl::StrCat("--node_name=agent-", i),
        "--devices=" +
            (options.devices.empty() ? absl::StrCat("cpu:", options.slots) : options.devices),
        "--work_dir=" + work,
        absl::StrCat("--worker_socket=", c->socket_dir_, "/a", i, ".sock"),
        "--metrics_listen=127.0.0.1:0",
        "--stop_grace=2",
        "--trainer_binary=" + Runfile("trainer/trainer")};
    argv.insert(argv.end(), options.agent_flags.begin(), options.agent_flags.end());
    auto agent = Subprocess::Start(argv, work + ".log");
    if (!agent.ok()) return agent.status();
    c->agents_.push_back(std::move(*agent));
    c->agent_argv_.push_back(argv);
    c->work_dirs_.push_back(work);
  }
  const bool registered = WaitFor(
      [&] {
        const std::string nodes = c->Ctl({"nodes"}).output;
        for (int i = 0; i < options.agents; ++i) {
          if (nodes.find(absl::StrCat("agent-", i)) == std::string::npos) return false;
        }
        return true;
      },
      absl::Seconds(30));
  if (!registered) {
    return absl::DeadlineExceededError(absl::StrCat("agents did not register:\n",
                                                    c->agents_[0].Log()));
  }
  return c;
}

TestCluster::~TestCluster() {
  agents_.clear();  // SIGKILLs the agents' process groups (their workers die with them)
  coordinator_.reset();
  std::error_code ec;
  std::filesystem::remove_all(socket_dir_, ec);
}

absl::Status TestCluster::RestartCoordinator() {
  const std::string address = coordinator_->address();
  coordinator_.reset();
  std::vector<std::string> flags = coordinator_flags_;
  flags.push_back("--listen=" + address);
  auto coordinator = StartCoordinator(flags);
  if (!coordinator.ok()) return coordinator.status();
  coordinator_ = std::make_unique<CoordinatorProcess>(std::move(*coordinator));
  return absl::OkStatus();
}

absl::Status TestCluster::RestartAgent(int i) {
  auto agent = Subprocess::Start(agent_argv_[i], work_dirs_[i] + ".log");
  if (!agent.ok()) return agent.status();
  agents_[i] = std::move(*agent);
  return absl::OkStatus();
}

CommandResult TestCluster::Ctl(std::vector<std::string> args) {
  return CtlAt(coordinator_->address(), std::move(args));
}

std::string TestCluster::Submit(const std::string& name, const std::string& yaml) {
  return SubmitJobFile(coordinator_->address(), dir_, name, yaml);
}

std::string TestCluster::WaitForEnd(const std::string& job, absl::Duration timeout) {
  return WaitForJobEnd(coordinator_->address(), job, timeout);
}

std::string TestCluster::RankLog(const std::string& job, int generation, int rank) const {
  return RankLogIn(work_dirs_, job, generation, rank);
}

int TestCluster::AgentMetricsPort(int i) const {
  std::smatch m;
  const std::string log = agents_[i].Log();
  int port = 0;
  if (std::regex_search(log, m, std::regex("agent metrics listening on [0-9.]+:(\\d+)"))) {
    (void)absl::SimpleAtoi(m[1].str(), &port);  // the regex guarantees digits
  }
  return port;
}

std::vector<std::pair<int, std::string>> TrainerLosses(const std::string& log) {
  std::vector<std::pair<int, std::string>> losses;
  const std::regex re("step (\\d+)/\\d+ loss (\\S+)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it) {
    losses.emplace_back(std::stoi((*it)[1].str()), (*it)[2].str());
  }
  return losses;
}

absl::StatusOr<CommandResult> RunTrainer(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"trainer/trainer", "--blas_threads=1"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, "");
}

CommandResult TrainOrFail(const std::vector<std::string>& args) {
  absl::StatusOr<CommandResult> r = RunTrainer(args);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : CommandResult{};
}

double TrainerLossValue(const std::string& printed) {
  double v = 0;
  if (absl::SimpleAtod(printed, &v)) return v;
  ADD_FAILURE() << "not a loss: \"" << printed << "\"";
  return std::numeric_limits<double>::quiet_NaN();
}

double ExpectLossesFollow(const std::vector<std::pair<int, std::string>>& got,
                          const std::vector<std::pair<int, std::string>>& want, double tolerance) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    EXPECT_EQ(got[i].first, static_cast<int>(i) + 1);
    const double x = TrainerLossValue(got[i].second), y = TrainerLossValue(want[i].second);
    worst = std::max(worst, std::abs(x - y) / std::abs(y));
    EXPECT_NEAR(x, y, tolerance * std::abs(y)) << "step " << i + 1;
  }
  return worst;
}

std::string TrainerFinalCrc(const std::string& log) {
  const size_t at = log.find("params crc32c ");
  return at == std::string::npos ? "" : log.substr(at + 14, 8);
}

std::vector<std::string> CheckpointDirs(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

int HangBlamedRank(const std::string& job_json) {
  std::smatch m;
  int rank = -1;
  if (std::regex_search(job_json, m,
                        std::regex("\"kind\": \"hang\",[^}]*\"ranks\": \\[\\s*(\\d+)\\s*\\]"))) {
    (void)absl::SimpleAtoi(m[1].str(), &rank);  // the regex guarantees digits
  }
  return rank;
}

void ExpectNoRankFinishedTheNanStep(const TestCluster& cluster, const std::string& job, int ranks,
                                    int step) {
  int failed_by_itself = 0;
  for (int rank = 0; rank < ranks; ++rank) {
    const std::string log = cluster.RankLog(job, 1, rank);
    EXPECT_EQ(TrainerLosses(log).size(), static_cast<size_t>(step - 1)) << log;
    if (log.find("trainer failed") == std::string::npos) continue;
    ++failed_by_itself;
    EXPECT_NE(log.find(absl::StrCat("trainer failed (exit 78, fatal): OUT_OF_RANGE: step ", step,
                                    ": the gradient norm is nan")),
              std::string::npos)
        << log;
  }
  EXPECT_GE(failed_by_itself, 1);  // the one the job's reason names, at least
}

void ExpectLastOutputBeforeTheStopFromItsLog(TestCluster& cluster, const std::string& job,
                                             int generation, int rank) {
  const std::regex quote(
      absl::StrCat("blamed for the hang: rank ", rank,
                   " on [^ ]+ [^:\"]+: last output before the stop: ([^\"]+)\""));
  std::string json, line;
  ASSERT_TRUE(WaitFor(
      [&] {
        json = cluster.Ctl({"get", "job", job, "-o", "json"}).output;
        std::smatch m;
        line = std::regex_search(json, m, quote) ? m[1].str() : "";
        return !line.empty();
      },
      absl::Seconds(30)))
      << json;
  EXPECT_NE(cluster.RankLog(job, generation, rank).find("\n" + line + "\n"), std::string::npos)
      << line;
}

pid_t TrainerPid(const std::string& log) {
  std::smatch m;
  int pid = 0;
  if (std::regex_search(log, m, std::regex("rank \\d+/\\d+ pid (\\d+)"))) {
    (void)absl::SimpleAtoi(m[1].str(), &pid);  // the regex guarantees digits
  }
  return pid;
}

}  // namespace ringmaster::testing
