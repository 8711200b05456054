#include "agent/log_retention.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/testing/subprocess.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

namespace fs = std::filesystem;

class PruneLogsTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = testing::FreshTestCaseDir("logs-"); }

  // Writes `bytes` into JOB/GEN/rank-0.log, last written `age_minutes` ago.
  void Write(const std::string& job, const std::string& gen, int bytes, int age_minutes) {
    const fs::path dir = fs::path(root_) / job / gen;
    fs::create_directories(dir);
    const fs::path file = dir / "rank-0.log";
    std::ofstream(file) << std::string(bytes, 'x');
    fs::last_write_time(file, fs::file_time_type::clock::now() - std::chrono::minutes(age_minutes));
  }

  bool Exists(const std::string& rel) const { return fs::exists(fs::path(root_) / rel); }

  std::string root_;
};

TEST_F(PruneLogsTest, RemovesTheLeastRecentlyWrittenGenerationsUntilTheRestFits) {
  Write("job-a", "1", 400, 50);
  Write("job-a", "2", 300, 40);
  Write("job-b", "1", 200, 30);
  Write("job-c", "1", 100, 10);
  const LogPruneResult r = PruneLogs(root_, 350, {});
  EXPECT_EQ(r.generations_removed, 2);
  EXPECT_EQ(r.bytes_removed, 700);
  EXPECT_EQ(r.bytes_kept, 300);
  EXPECT_FALSE(Exists("job-a"));  // both generations gone, and the job's directory with them
  EXPECT_TRUE(Exists("job-b/1/rank-0.log"));
  EXPECT_TRUE(Exists("job-c/1/rank-0.log"));
}

TEST_F(PruneLogsTest, WithinTheBudgetOrWithoutOneNothingIsRemoved) {
  Write("job-a", "1", 400, 50);
  Write("job-a", "2", 300, 40);
  LogPruneResult r = PruneLogs(root_, 700, {});
  EXPECT_EQ(r.generations_removed, 0);
  EXPECT_EQ(r.bytes_kept, 700);
  r = PruneLogs(root_, 0, {});
  EXPECT_EQ(r.generations_removed, 0);
  EXPECT_EQ(r.bytes_kept, 700);
  EXPECT_TRUE(Exists("job-a/1/rank-0.log"));
}

TEST_F(PruneLogsTest, LiveGenerationsAreKeptEvenOverTheBudget) {
  Write("job-a", "1", 400, 50);  // still running, however old its last line
  Write("job-a", "2", 300, 40);
  Write("job-b", "1", 200, 30);
  const LogPruneResult r = PruneLogs(root_, 100, {{"job-a", "1"}, {"job-b", "1"}});
  EXPECT_EQ(r.generations_removed, 1);
  EXPECT_EQ(r.bytes_kept, 600);
  EXPECT_TRUE(Exists("job-a/1/rank-0.log"));
  EXPECT_FALSE(Exists("job-a/2"));
  EXPECT_TRUE(Exists("job-b/1/rank-0.log"));
}

TEST_F(PruneLogsTest, AJobBeingLaunchedKeepsItsDirectory) {
  Write("job-a", "1", 400, 50);
  // Generation 2 of job-a is being launched: its directory does not exist yet, and the job's
  // directory must stay for it even when generation 1 goes.
  const LogPruneResult r = PruneLogs(root_, 100, {{"job-a", "2"}});
  EXPECT_EQ(r.generations_removed, 1);
  EXPECT_FALSE(Exists("job-a/1"));
  EXPECT_TRUE(Exists("job-a"));
}

TEST_F(PruneLogsTest, ARotatedLogCountsAndAFileBesideTheJobsIsLeftAlone) {
  Write("job-a", "1", 100, 50);
  std::ofstream(root_ + "/job-a/1/rank-0.log.1") << std::string(500, 'x');
  fs::last_write_time(root_ + "/job-a/1/rank-0.log.1",
                      fs::file_time_type::clock::now() - std::chrono::minutes(60));
  std::ofstream(root_ + "/README") << "not a job";
  Write("job-b", "1", 100, 10);
  const LogPruneResult r = PruneLogs(root_, 150, {});
  EXPECT_EQ(r.bytes_removed, 600);
  EXPECT_EQ(r.bytes_kept, 100);
  EXPECT_TRUE(Exists("README"));
}

TEST(PruneLogsMissingTest, AMissingDirectoryIsEmpty) {
  const LogPruneResult r = PruneLogs(testing::TestTempDir() + "/no-such-logs", 1, {});
  EXPECT_EQ(r.generations_removed, 0);
  EXPECT_EQ(r.bytes_kept, 0);
}

}  // namespace
}  // namespace ringmaster::agent
