// The fault-injection suite: a 4-rank GPT job (DP = 4 over two real agents, ZeRO-1, a checkpoint
// every 20 steps) under a real coordinator, with real faults injected while it trains. In every
// failure case the job must end SUCCEEDED with the restart counted and the same final loss and
// parameters as the uninterrupted run (CPU training is deterministic); a straggler must be
// flagged without a restart; a clean run must flag nobody.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_contents.h"
#include "common/status.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kModel[] =
    "  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n"
    "  batch: {micro_batch: 2, global_batch: 8}\n"
    "  optimizer: {lr: 2.0e-3, warmup_steps: 10, weight_decay: 0.1, clip_grad_norm: 1.0}\n"
    "  zero_stage: 1\n";

constexpr char kDataParallel[] = "{tensor: 1, pipeline: 1, data: 4}";

// A job of 4 ranks on the two agents; `program` is "builtin: gpt" or a command line.
std::string Job(const std::string& name, const std::string& program, int steps,
                const std::string& checkpoint_dir, const std::string& extra = "",
                const std::string& parallelism = kDataParallel) {
  return absl::StrCat(
      "name: ", name, "\nnodes: 2\ndevices_per_node: 2\n", "parallelism: ", parallelism,
      "\ntrainer:\n  ", program, "\n", kModel, "  steps: ", steps, "\n",
      checkpoint_dir.empty()
          ? ""
          : absl::StrCat("checkpoint: {dir: ", checkpoint_dir, ", every_steps: 20, keep: 3}\n"),
      "restart: {max_restarts: 3}\n", extra);
}

std::string Builtin() { return "builtin: gpt"; }
std::string Command(const std::string& flags) {
  return absl::StrCat("command: [\"", TestCluster::Runfile("trainer/trainer"), "\"", flags, "]");
}

// The line the trainer ends with: final loss and the parameters' CRC-32C.
std::string FinalLine(const std::string& log) {
  std::smatch m;
  return std::regex_search(log, m, std::regex("training done: [^\n]*")) ? m[0].str() : "";
}

int Restarts(TestCluster& c, const std::string& job) {
  std::smatch m;
  const std::string json = c.Ctl({"get", "job", job, "-o", "json"}).output;
  int n = -1;
  if (std::regex_search(json, m, std::regex("\"restarts\": (\\d+)"))) {
    (void)absl::SimpleAtoi(m[1].str(), &n);  // the regex guarantees digits
  } else if (json.find("\"job_id\"") != std::string::npos) {
    n = 0;  // proto3 JSON leaves a zero out
  }
  return n;
}

class FaultToleranceTest : public ::testing::Test {
 protected:
  // The uninterrupted run, once for the suite.
  static void SetUpTestSuite() {
    const std::string dir = TestTempDir() + "/fault_baseline";
    std::filesystem::remove_all(dir);
    auto cluster = TestCluster::Start(dir, {});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    const std::string id =
        (*cluster)->Submit("baseline", Job("baseline", Builtin(), kSteps, dir + "/ckpt"));
    ASSERT_FALSE(id.empty());
    ASSERT_EQ((*cluster)->WaitForEnd(id, absl::Seconds(300)), "SUCCEEDED");
    baseline_ = new std::string(FinalLine((*cluster)->RankLog(id, 1, 0)));
    baseline_events_ = new std::string((*cluster)->Ctl({"describe", "job", id}).output);
  }
  static void TearDownTestSuite() {
    delete baseline_;
    delete baseline_events_;
  }

  void SetUp() override {
    ASSERT_NE(baseline_, nullptr);
    ASSERT_THAT(*baseline_, HasSubstr("training done: 200 steps"));
    dir_ = FreshTestCaseDir();
    auto cluster = TestCluster::Start(dir_, {});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }

  // Submits the standard job and waits until its checkpoint at step 40 is committed.
  std::string StartAndWaitForCheckpoint(const std::string& name, const std::string& extra = "") {
    const std::string id =
        cluster_->Submit(name, Job(name, Builtin(), kSteps, dir_ + "/ckpt", extra));
    EXPECT_FALSE(id.empty());
    EXPECT_TRUE(WaitFor(
        [&] {
          return cluster_->RankLog(id, 1, 0).find("checkpoint at step 40 committed") !=
                 std::string::npos;
        },
        absl::Seconds(120)))
        << cluster_->RankLog(id, 1, 0);
    return id;
  }

  // The job ended SUCCEEDED after `restarts` restarts, in the same state as the uninterrupted run.
  void ExpectRecoveredExactly(const std::string& id, int restarts) {
    const std::string described = cluster_->Ctl({"describe", "job", id}).output;
    ASSERT_EQ(cluster_->WaitForEnd(id, absl::Seconds(300)), "SUCCEEDED") << described;
    EXPECT_EQ(Restarts(*cluster_, id), restarts) << described;
    const int last_generation = restarts + 1;
    const std::string log = cluster_->RankLog(id, last_generation, 0);
    EXPECT_EQ(FinalLine(log), *baseline_) << log;
    if (restarts > 0) {
      EXPECT_THAT(log, HasSubstr("resumed from the checkpoint at step"));
    }
    // The last generation owns the checkpoint directory (an older one still running would stop).
    EXPECT_EQ(ReadFileContents(dir_ + "/ckpt/OWNER").value_or(""),
              absl::StrCat("ringmaster-checkpoint-owner 1\njob ", id, "\ngeneration ",
                           last_generation, "\n"));
  }

  static constexpr int kSteps = 200;
  static std::string* baseline_;
  static std::string* baseline_events_;
  std::string dir_;
  std::unique_ptr<TestCluster> cluster_;
};

std::string* FaultToleranceTest::baseline_ = nullptr;
std::string* FaultToleranceTest::baseline_events_ = nullptr;

TEST_F(FaultToleranceTest, CleanRunFlagsNoStragglerAndNoHang) {
  const std::string events = baseline_events_->substr(baseline_events_->find("Events:"));
  EXPECT_THAT(events, Not(HasSubstr("  straggler  ")));
  EXPECT_THAT(events, Not(HasSubstr("  hang  ")));
  EXPECT_THAT(events, Not(HasSubstr("RESTARTING")));
  EXPECT_THAT(events, HasSubstr("SUCCEEDED"));
}

TEST_F(FaultToleranceTest, SigkilledWorkerRestartsFromTheCheckpointAndLosesNothing) {
  const std::string id = StartAndWaitForCheckpoint("kill-worker");
  const pid_t victim = TrainerPid(cluster_->RankLog(id, 1, 1));
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ExpectRecoveredExactly(id, 1);
  // The job names the exit the coordinator read first: the kill, or a peer's retryable exit (its
  // Gloo connection to the victim reset) when that peer's agent reported sooner.
  const std::string described = cluster_->Ctl({"describe", "job", id}).output;
  EXPECT_THAT(described, AnyOf(HasSubstr("was killed by signal 9"),
                               HasSubstr(absl::StrCat(" exited with code ", kExitRetryable))));
  EXPECT_THAT(described, HasSubstr("recovery took"));
  // Its agent saw the kill either way (and had reaped it before the next generation started).
  const std::string exited = absl::StrCat("(pid ", victim, ") exited: code ");
  std::string reaped;
  for (int i = 0; i < 2; ++i) {
    const std::string log = cluster_->agent(i).Log();
    if (const size_t at = log.find(exited); at != std::string::npos) {
      reaped = log.substr(at, log.find('\n', at) - at);
    }
  }
  EXPECT_THAT(reaped, HasSubstr(", signal 9")) << cluster_->agent(0).Log();
}

// hang_timeout 2, shorter than it takes the stopped process to count as silent (2.5 s after
// its last summary arrived, which can be up to a summary interval after it stopped): the
// coordinator holds the first hang report until the evidence names the stopped rank, instead of
// blaming the rank whose silence its agent noticed first.
TEST_F(FaultToleranceTest, StoppedWorkerIsAHangThatNamesItAndRestarts) {
  // checkpoint_timeout: should the stop land inside a checkpoint (milliseconds here), the hang
  // comes 20 s later rather than after the 30 min default.
  const std::string id =
      StartAndWaitForCheckpoint("hang", "watchdog: {hang_timeout: 2, checkpoint_timeout: 20}\n");
  const pid_t victim = TrainerPid(cluster_->RankLog(id, 1, 2));
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  ExpectRecoveredExactly(id, 1);
  auto events = cluster_->Ctl({"get", "job", id, "-o", "json"}).output;
  // The hang event names rank 2 (the stopped one), whichever rank's silence was noticed first.
  EXPECT_EQ(HangBlamedRank(events), 2) << events;
  // Stopping the hung generation (SIGCONT and SIGTERM), its agent quotes what rank 2 was doing:
  // its last line before the stop, a line of its log.
  ASSERT_NO_FATAL_FAILURE(ExpectLastOutputBeforeTheStopFromItsLog(*cluster_, id, 1, 2));
  events = cluster_->Ctl({"get", "job", id, "-o", "json"}).output;
  EXPECT_THAT(events, HasSubstr("rank 2 on agent-1 was killed by signal 15: last output before"));
}

// The job runs until the watchdog has named the straggler (however fast this machine trains),
// then is cancelled. Tensor parallel 2 x data parallel 2: the four ranks form one pipeline
// stage, so rank 3 is judged against its tensor-parallel peer (rank 2, which waits for it, in
// the passes' all-reduces among other places) and the other replica; only rank 3 is named.
TEST_F(FaultToleranceTest, SlowRankIsFlaggedAsAStragglerWithoutARestart) {
  const std::string id = cluster_->Submit(
      "straggler", Job("straggler", Command(", \"--slow_rank=3\", \"--slow_factor=1.6\""), 1000000,
                       "", "", "{tensor: 2, pipeline: 1, data: 2}"));
  ASSERT_FALSE(id.empty());
  std::string described;
  EXPECT_TRUE(WaitFor(
      [&] {
        described = cluster_->Ctl({"describe", "job", id}).output;
        return described.find("rank 3 on agent-1 computes") != std::string::npos;
      },
      absl::Seconds(180)))
      << described;
  EXPECT_THAT(described, HasSubstr("straggler"));
  EXPECT_THAT(described, HasSubstr("State:        RUNNING"));
  // The assignments table says it on rank 3's row, with its ratio, and on no other row.
  EXPECT_TRUE(std::regex_search(
      described, std::regex("\\n  3 +agent-1 [^\\n]*straggler \\(\\d+\\.\\d\\dx\\) ")))
      << described;
  const std::regex flagged_row("\\n  \\d+ +agent-[^\\n]*straggler \\(");
  EXPECT_EQ(std::distance(std::sregex_iterator(described.begin(), described.end(), flagged_row),
                          std::sregex_iterator()),
            1)
      << described;
  EXPECT_EQ(Restarts(*cluster_, id), 0);
  for (int rank : {0, 1, 2}) {
    EXPECT_THAT(described, Not(HasSubstr(absl::StrCat("rank ", rank, " on agent-")))) << rank;
  }
  EXPECT_EQ(cluster_->Ctl({"cancel", id}).exit_code, 0);
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(60)), "CANCELLED");
}

// A pure pipeline of four stages, one rank each: stages run different layers, so a stage cannot
// be compared with the others, and a rank alone in its stage is judged by how much it slowed down
// against its own earlier compute time, over the other stages' slowdowns. Rank 2 trains at full
// speed for its first 40 s, then its compute takes three times as long: it alone is named,
// against its baseline, without a restart. The baseline forms from a rank's first 13 summaries
// (min_samples + window), which its agent sends at most once a second (checked every 250 ms):
// about 16 s, twice that on a loaded machine, within the 40 s.
TEST_F(FaultToleranceTest, AStageThatSlowsDownMidRunIsFlaggedAgainstItsBaseline) {
  const std::string yaml =
      absl::StrCat("name: slowing\nnodes: 2\ndevices_per_node: 2\n",
                   "parallelism: {tensor: 1, pipeline: 4, data: 1}\ntrainer:\n  ",
                   Command(", \"--slow_rank=2\", \"--slow_factor=3\", \"--slow_after_seconds=40\""),
                   "\n  model: {layers: 4, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n",
                   "  batch: {micro_batch: 2, global_batch: 8}\n  optimizer: {lr: 2.0e-3}\n",
                   "  steps: 1000000\nrestart: {max_restarts: 3}\n");
  const std::string id = cluster_->Submit("slowing", yaml);
  ASSERT_FALSE(id.empty());
  std::string described;
  EXPECT_TRUE(WaitFor(
      [&] {
        described = cluster_->Ctl({"describe", "job", id}).output;
        return described.find("straggler\n") != std::string::npos ||
               described.find(": straggler") != std::string::npos;
      },
      absl::Seconds(240)))
      << described;
  EXPECT_TRUE(std::regex_search(
      described,
      std::regex("rank 2 on agent-\\d slowed down \\d+\\.\\d\\dx more than the other "
                 "pipeline stages \\(each against its own earlier compute time; the "
                 "only rank of stage 2\\) \\(threshold 1\\.20\\) at step \\d+: straggler")))
      << described;
  // The assignments table says it on rank 2's row, and on no other.
  EXPECT_TRUE(std::regex_search(
      described, std::regex("\\n  2 +agent-\\d [^\\n]*straggler \\(\\d+\\.\\d\\dx\\) ")))
      << described;
  const std::regex flagged_row("\\n  \\d+ +agent-[^\\n]*straggler \\(");
  EXPECT_EQ(std::distance(std::sregex_iterator(described.begin(), described.end(), flagged_row),
                          std::sregex_iterator()),
            1)
      << described;
  for (int rank : {0, 1, 3}) {
    EXPECT_THAT(described, Not(HasSubstr(absl::StrCat("rank ", rank, " on agent-")))) << rank;
  }
  EXPECT_THAT(described, HasSubstr("State:        RUNNING"));
  EXPECT_EQ(Restarts(*cluster_, id), 0);
  EXPECT_EQ(cluster_->Ctl({"cancel", id}).exit_code, 0);
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(60)), "CANCELLED");
}

// As a replacement launched elsewhere would when it resumes, "generation 2" claims the checkpoint
// directory while generation 1 trains (the claim is written by hand: there is no partition to
// make here). At its next checkpoint generation 1 stops (exit 75) saying why; the first such
// exit restarts the job (the agents stop the other ranks), and generation 2 finishes it losing
// nothing.
TEST_F(FaultToleranceTest, AGenerationWhoseDirectoryANewerOneClaimedStopsAndTheJobGoesOn) {
  const std::string id = StartAndWaitForCheckpoint("claimed");
  const std::string owner = dir_ + "/ckpt/OWNER";
  std::ofstream(owner + ".tmp") << "ringmaster-checkpoint-owner 1\njob " << id
                                << "\ngeneration 2\n";
  std::filesystem::rename(owner + ".tmp", owner);
  ExpectRecoveredExactly(id, 1);
  // The exit that restarted the job quotes the rank's own finding, or another rank's (a rank
  // whose check ran before the claim landed).
  const std::string described = cluster_->Ctl({"describe", "job", id}).output;
  EXPECT_THAT(described, HasSubstr("exited with code 75: ABORTED: "));
  EXPECT_THAT(described, ::testing::AnyOf(HasSubstr("generation 1 of job " + id + " is stale"),
                                          HasSubstr("another rank found checkpoint.dir claimed")))
      << described;
}

TEST_F(FaultToleranceTest, KilledAgentLosesItsNodeAndTheJobResumesWhenItReturns) {
  const std::string id = StartAndWaitForCheckpoint("kill-agent");
  cluster_->agent(1).Signal(SIGKILL);
  ASSERT_TRUE(cluster_->agent(1).Wait(absl::Seconds(30)).ok());
  // The coordinator marks the node lost (its stream closed); the job's other ranks fail as their
  // peers vanished, so whichever the coordinator hears first restarts the job, which then waits
  // for capacity.
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string nodes = cluster_->Ctl({"nodes"}).output;
        const size_t at = nodes.find("agent-1");
        return at != std::string::npos &&
               nodes.substr(at, nodes.find('\n', at) - at).find("LOST") != std::string::npos;
      },
      absl::Seconds(30)))
      << cluster_->Ctl({"nodes"}).output;
  ASSERT_TRUE(cluster_->RestartAgent(1).ok());
  ExpectRecoveredExactly(id, 1);
}

TEST_F(FaultToleranceTest, KilledCoordinatorIsReplacedAndAdoptsTheRunningJob) {
  const std::string id = StartAndWaitForCheckpoint("kill-coordinator");
  cluster_->coordinator().process.Signal(SIGKILL);
  ASSERT_TRUE(cluster_->coordinator().process.Wait(absl::Seconds(30)).ok());
  ASSERT_TRUE(cluster_->RestartCoordinator().ok());
  ExpectRecoveredExactly(id, 0);  // adopted: same generation, nothing lost
}

// The whole job is frozen (every worker SIGSTOPped) just after a checkpoint; meanwhile its newest
// complete checkpoint is damaged. The watchdog declares the hang and restarts the job, which
// must skip the damaged checkpoint, resume from the one before, and end exactly where the
// uninterrupted run does.
class DamagedCheckpointTest : public FaultToleranceTest,
                              public ::testing::WithParamInterface<bool> {};

TEST_P(DamagedCheckpointTest, TheNewestDamagedCheckpointIsSkipped) {
  const bool truncate = GetParam();
  const std::string id = StartAndWaitForCheckpoint("damaged", "watchdog: {hang_timeout: 3}\n");
  for (int rank = 0; rank < 4; ++rank) {
    const pid_t pid = TrainerPid(cluster_->RankLog(id, 1, rank));
    ASSERT_GT(pid, 0);
    ASSERT_EQ(kill(pid, SIGSTOP), 0);
  }
  // The newest committed checkpoint now. The job is frozen, but a checkpoint it was writing
  // when it stopped could still commit when the restart's SIGCONT + SIGTERM wakes it: such a
  // directory (no MANIFEST yet) is removed, so that the damaged one stays the newest.
  int64_t newest = -1;
  std::map<int64_t, std::filesystem::path> uncommitted;
  for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/ckpt")) {
    int64_t step = 0;
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, "step-") || !absl::SimpleAtoi(name.substr(5), &step)) continue;
    if (std::filesystem::exists(entry.path() / "MANIFEST")) {
      newest = std::max(newest, step);
    } else {
      uncommitted[step] = entry.path();
    }
  }
  ASSERT_GE(newest, 40);
  for (const auto& [step, path] : uncommitted) {
    if (step > newest) std::filesystem::remove_all(path);
  }
  const std::string victim = absl::StrFormat("%s/ckpt/step-%08d/rank-00001.bin", dir_, newest);
  if (truncate) {
    std::filesystem::resize_file(victim, std::filesystem::file_size(victim) / 2);
  } else {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(victim) / 2));
    f.put('\x5a');
  }
  ExpectRecoveredExactly(id, 1);
  const std::string log = cluster_->RankLog(id, 2, 0);
  EXPECT_THAT(log, HasSubstr(absl::StrCat("skipping checkpoint at step ", newest)));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("resumed from the checkpoint at step (\\d+)")));
  EXPECT_LT(std::stoll(m[1].str()), newest);
}

INSTANTIATE_TEST_SUITE_P(TruncatedOrCorrupted, DamagedCheckpointTest, ::testing::Bool());

}  // namespace
}  // namespace ringmaster::testing
