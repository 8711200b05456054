// A checkpoint directory on a full disk, with real processes: a tiny tmpfs (256 KiB, smaller than
// one rank's file) mounted as checkpoint.dir of 4-rank GPT jobs on a local cluster (a coordinator
// and two agents). Every save fails with "No space left on device". Checked:
//  - the failures reach the coordinator: "checkpoint_failed" events and
//    ringmaster_job_checkpoint_failures_total on its /metrics;
//  - a real SIGKILL of a worker restarts the job from step 0, and the "recovered" event says how
//    many trained steps were lost and why;
//  - with checkpoint.max_consecutive_failures: 2 a job FAILS, its reason naming checkpoint.dir and
//    the error, and no uncommitted step-N directory is left behind.
// The alert for such a job (RingmasterCheckpointFailing, RingmasterCheckpointMissing) is checked by
// promtool's rule tests (//deploy/prometheus:rules_test).
//
// Needs root (mount); skips otherwise, or when the mount is refused (a container without
// CAP_SYS_ADMIN). The tmpfs is unmounted in TearDownTestSuite, also after a failure.
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <regex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/http_client.h"
#include "common/testing/series_value.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;

// 4 ranks, ZeRO-1: every rank holds a quarter of the optimizer state, about 330 KB in its file,
// more than the whole tmpfs.
std::string Job(const std::string& name, const std::string& dir, int steps,
                const std::string& checkpoint_extra = "") {
  return absl::StrCat("name: ", name,
                      "\nnodes: 2\ndevices_per_node: 2\n"
                      "parallelism: {tensor: 1, pipeline: 1, data: 4}\n"
                      "trainer:\n  builtin: gpt\n"
                      "  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n"
                      "  batch: {micro_batch: 2, global_batch: 8}\n"
                      "  optimizer: {lr: 2.0e-3, warmup_steps: 10}\n"
                      "  zero_stage: 1\n"
                      "  steps: ",
                      steps, "\ncheckpoint: {dir: ", dir, ", every_steps: 10, keep: 2",
                      checkpoint_extra, "}\nrestart: {max_restarts: 3}\n");
}

// The highest "step N/M" line of a trainer's log, or 0.
int64_t LastStep(const std::string& log) {
  int64_t last = 0;
  static const std::regex kStep("step (\\d+)/\\d+ loss");
  for (std::sregex_iterator it(log.begin(), log.end(), kStep), end; it != end; ++it) {
    int64_t step = 0;
    if (absl::SimpleAtoi((*it)[1].str(), &step)) last = std::max(last, step);
  }
  return last;
}

class CheckpointFailureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) {
      skip_ = new std::string("needs root to mount a tmpfs");
      return;
    }
    const std::string dir = TestTempDir() + "/checkpoint_failure";
    std::filesystem::remove_all(dir);
    full_ = new std::string(dir + "/full");
    std::filesystem::create_directories(*full_);
    if (mount("tmpfs", full_->c_str(), "tmpfs", 0, "size=256k") != 0) {
      skip_ = new std::string(absl::StrCat("cannot mount a tmpfs: ", std::strerror(errno)));
      delete full_;
      full_ = nullptr;
      return;
    }
    auto cluster = TestCluster::Start(dir + "/cluster", {});
    if (!cluster.ok()) {
      start_error_ = new std::string(cluster.status().ToString());
      return;
    }
    cluster_ = cluster->release();
  }

  static void TearDownTestSuite() {
    delete cluster_;  // its processes first: none may keep the mount busy
    cluster_ = nullptr;
    if (full_ != nullptr && umount2(full_->c_str(), 0) != 0) {
      umount2(full_->c_str(), MNT_DETACH);  // still gone from the namespace once unused
    }
    delete full_;
    delete skip_;
    delete start_error_;
    full_ = skip_ = start_error_ = nullptr;
  }

  void SetUp() override {
    if (skip_ != nullptr) GTEST_SKIP() << *skip_;
    ASSERT_EQ(start_error_, nullptr) << *start_error_;
    ASSERT_NE(cluster_, nullptr);
  }

  static std::string Metrics() {
    auto page = HttpGet("127.0.0.1", cluster_->coordinator().metrics_port, "/metrics");
    return page.ok() ? page->body : "";
  }

  static std::string Described(const std::string& id) {
    return cluster_->Ctl({"describe", "job", id}).output;
  }

  static TestCluster* cluster_;
  static std::string* full_;         // the tmpfs's mount point
  static std::string* skip_;         // why the suite skips, if it does
  static std::string* start_error_;  // the cluster's start failed
};

TestCluster* CheckpointFailureTest::cluster_ = nullptr;
std::string* CheckpointFailureTest::full_ = nullptr;
std::string* CheckpointFailureTest::skip_ = nullptr;
std::string* CheckpointFailureTest::start_error_ = nullptr;

// The default policy: training goes on, every failure is counted and the first is an event; a
// SIGKILLed worker restarts the job from step 0 and the recovery says what that lost.
TEST_F(CheckpointFailureTest, FailuresAreEventsAndACounterAndARestartSaysWhatWasLost) {
  const std::string dir = *full_ + "/keep-training";
  const std::string id = cluster_->Submit("keep-training", Job("keep-training", dir, 100000));
  ASSERT_FALSE(id.empty());
  auto cancel = [&] { cluster_->Ctl({"cancel", id}); };

  const std::string counter =
      absl::StrCat("ringmaster_job_checkpoint_failures_total{job_id=\"", id, "\"}");
  ASSERT_TRUE(WaitFor([&] { return SeriesValue(Metrics(), counter) >= 3; }, absl::Seconds(120)))
      << Metrics() << Described(id) << cluster_->RankLog(id, 1, 0);
  std::string described = Described(id);
  EXPECT_THAT(described, HasSubstr("checkpoint_failed"));
  EXPECT_THAT(described, HasSubstr("No space left on device"));
  EXPECT_THAT(described, HasSubstr("training goes on (checkpoint.max_consecutive_failures is 0)"));
  // Each failed save removed what it had written: the disk is not full of partial checkpoints
  // (a save may be under way: at most its own directory is there).
  EXPECT_LE(CheckpointDirs(dir).size(), 1u);

  // Once the coordinator knows every rank passed step 30 (three failed saves), a real SIGKILL of
  // rank 1.
  const std::string step = absl::StrCat("ringmaster_job_step{job_id=\"", id, "\"}");
  ASSERT_TRUE(WaitFor([&] { return SeriesValue(Metrics(), step) >= 30; }, absl::Seconds(120)))
      << Metrics();
  const pid_t victim = TrainerPid(cluster_->RankLog(id, 1, 1));
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const int64_t trained = LastStep(cluster_->RankLog(id, 1, 0));
  ASSERT_TRUE(WaitFor(
      [&] {
        described = Described(id);
        return absl::StrContains(described, "trained steps lost");
      },
      absl::Seconds(180)))
      << described;
  static const std::regex kLost(
      "resumed from step 0: (\\d+) trained steps lost \\(no checkpoint was ever committed: "
      "(\\d+) saves failed, the last at step (\\d+): [^\n]*No space left on device\\)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(described, m, kLost)) << described;
  int64_t lost = 0, failed = 0;
  ASSERT_TRUE(absl::SimpleAtoi(m[1].str(), &lost));
  ASSERT_TRUE(absl::SimpleAtoi(m[2].str(), &failed));
  EXPECT_GE(lost, 30);  // every rank had passed step 30 before the kill
  EXPECT_LE(lost, trained + 1);
  EXPECT_GE(failed, 3);
  // Generation 2 started over: its rank 0 resumed from nothing.
  EXPECT_THAT(cluster_->RankLog(id, 2, 0), HasSubstr("no checkpoint to resume from"));
  cancel();
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(60)), "CANCELLED");
  EXPECT_EQ(Metrics().find(counter), std::string::npos) << "removed with the job";
}

// max_consecutive_failures: 2: the second failed save in a row fails the job for good, with a
// reason naming checkpoint.dir and the error; nothing of the failed saves is left.
TEST_F(CheckpointFailureTest, TwoFailuresInARowFailTheJob) {
  const std::string dir = *full_ + "/fail-fast";
  const std::string id = cluster_->Submit(
      "fail-fast", Job("fail-fast", dir, 100000, ", max_consecutive_failures: 2"));
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(cluster_->WaitForEnd(id, absl::Seconds(180)), "FAILED") << Described(id);
  const std::string described = Described(id);
  EXPECT_THAT(described, HasSubstr(absl::StrCat("checkpoint.dir ", dir,
                                                ": 2 checkpoints in a row could not be saved "
                                                "(checkpoint.max_consecutive_failures is 2)")));
  EXPECT_THAT(described, HasSubstr("No space left on device"));
  EXPECT_THAT(described, HasSubstr("the job fails after 2 in a row"));
  // Fatal (exit 78): not restarted.
  EXPECT_THAT(cluster_->Ctl({"get", "job", id, "-o", "json"}).output,
              HasSubstr("\"restarts\": 0,"));
  EXPECT_TRUE(CheckpointDirs(dir).empty());
  // Stopped soon after the second failure (the ranks agree to stop at the step after they learn
  // of it), long before the end.
  EXPECT_LE(LastStep(cluster_->RankLog(id, 1, 0)), 30);
}

}  // namespace
}  // namespace ringmaster::testing
