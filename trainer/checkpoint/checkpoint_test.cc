#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <utility>

#include "common/file_contents.h"
#include "common/testing/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/checkpointer.h"
#include "trainer/checkpoint/crc32c.h"
#include "trainer/comm/testing.h"

namespace ringmaster::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(Crc32cTest, KnownValueAndBothImplementationsAgree) {
  const std::string check = "123456789";
  EXPECT_EQ(Crc32c(0, check.data(), check.size()), 0xe3069283u);  // the standard check value
  std::mt19937 rng(1);
  std::string data(100003, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  EXPECT_EQ(Crc32c(0, data.data(), data.size()), Crc32cPortable(0, data.data(), data.size()));
  const uint32_t part = Crc32c(0, data.data(), 5000);
  EXPECT_EQ(Crc32c(part, data.data() + 5000, data.size() - 5000),
            Crc32c(0, data.data(), data.size()));
}

CheckpointLayout Layout() {
  CheckpointLayout l;
  l.world = 2;
  l.dp = 2;
  l.zero = 1;
  l.params = 100;
  l.padded = 128;
  return l;
}

RankState State(int64_t step, int rank) {
  RankState s;
  s.step = step;
  s.data_position = step * 8;
  s.data_seed = 99;
  for (int i = 0; i < 64; ++i) {
    s.master.push_back(step + rank + 0.5f * i);
    s.m.push_back(-i);
    s.v.push_back(i * i);
  }
  return s;
}

TEST(CheckpointFilesTest, TheLearningRateScaleRoundTripsAndItsIdentityIsNotWritten) {
  const std::string path = ringmaster::testing::TestTempDir() + "/rank-00002.bin";
  // The identity: the file is byte for byte one from before the lr_scale section.
  auto plain = WriteRankFile(path, 1, Layout(), State(7, 1));
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto state = ReadRankFile(path, *plain, Layout(), 7);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->lr_scale_from, 1);
  EXPECT_EQ(state->lr_scale_to, 1);
  RankState scaled = State(7, 1);
  scaled.lr_scale_start = 5;
  scaled.lr_scale_from = 1;
  scaled.lr_scale_to = 0.25;
  auto file = WriteRankFile(path, 1, Layout(), scaled);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->bytes, plain->bytes + 8 + 8 + 4 + 24);  // name string, size, 3 doubles
  state = ReadRankFile(path, *file, Layout(), 7);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->lr_scale_start, 5);
  EXPECT_EQ(state->lr_scale_from, 1);
  EXPECT_EQ(state->lr_scale_to, 0.25);
  EXPECT_EQ(state->data_position, 56);
  EXPECT_EQ(state->master, scaled.master);
}

TEST(CheckpointFilesTest, RankFileRoundTripsAndDetectsCorruption) {
  const std::string path = ringmaster::testing::TestTempDir() + "/rank-00001.bin";
  auto file = WriteRankFile(path, 1, Layout(), State(7, 1));
  ASSERT_TRUE(file.ok()) << file.status();
  auto state = ReadRankFile(path, *file, Layout(), 7);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->master, State(7, 1).master);
  EXPECT_EQ(state->v, State(7, 1).v);
  EXPECT_EQ(state->data_position, 56);
  // Intact but written for another step or layout: not damage, and a restart cannot fix it.
  absl::Status other_step = ReadRankFile(path, *file, Layout(), 8).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(other_step)) << other_step;
  EXPECT_THAT(other_step.message(), HasSubstr("this run expects step 8 rank 1"));
  CheckpointLayout other_layout = Layout();
  other_layout.zero = 2;
  EXPECT_TRUE(absl::IsFailedPrecondition(ReadRankFile(path, *file, other_layout, 7).status()));
  // Damage is told by the CRC-32C wherever it is: in the data, or in the header (byte 9, the
  // step), where the parse trips first.
  for (int offset : {100, 9}) {
    {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(offset);
      f.put('\x7f');
    }
    auto corrupt = ReadRankFile(path, *file, Layout(), 7);
    EXPECT_TRUE(absl::IsDataLoss(corrupt.status())) << offset << ": " << corrupt.status();
    EXPECT_THAT(corrupt.status().message(), HasSubstr("CRC-32C"));
  }
  EXPECT_FALSE(fs::exists(path + ".tmp." + std::to_string(getpid())));
}

TEST(CheckpointFilesTest, ManifestRoundTripsAndRejectsMalformedText) {
  Manifest m;
  m.step = 50;
  m.layout = Layout();
  m.files = {{0, "rank-00000.bin", 10, 0xdeadbeef}, {1, "rank-00001.bin", 12, 0x1}};
  auto parsed = ParseManifest(FormatManifest(m));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->step, 50);
  EXPECT_TRUE(parsed->layout == Layout());
  EXPECT_EQ(parsed->files[0].crc32c, 0xdeadbeefu);
  std::string text = FormatManifest(m);
  EXPECT_THAT(ParseManifest(text.substr(0, text.size() - 20)).status().message(),
              HasSubstr("MANIFEST line 5 is malformed"));
  EXPECT_THAT(ParseManifest("junk\n").status().message(), HasSubstr("line 1"));
}

TEST(CheckpointFilesTest, OwnerRoundTripsAndRejectsMalformedText) {
  auto parsed = ParseOwner(FormatOwner({"gpt-1", 12}));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->job, "gpt-1");
  EXPECT_EQ(parsed->generation, 12);
  for (const auto& [text, line] : std::vector<std::pair<std::string, int>>{
           {"", 1},
           {"junk\njob a\ngeneration 1\n", 1},
           {"ringmaster-checkpoint-owner 1\njob \ngeneration 1\n", 2},
           {"ringmaster-checkpoint-owner 1\njob a\n", 3},
           {"ringmaster-checkpoint-owner 1\njob a\ngeneration x\n", 3},
           {"ringmaster-checkpoint-owner 1\njob a\ngeneration 1\nmore\n", 4}}) {
    const absl::Status s = ParseOwner(text).status();
    EXPECT_TRUE(absl::IsDataLoss(s)) << text;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("OWNER line ", line, " is malformed"))) << text;
  }
}

// Two ranks (threads) save checkpoints; the newest complete one is chosen, and damaged ones are
// skipped.
class CheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ringmaster::testing::TestTempDir() + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    options_ = {dir_, 10, 2};
  }
  // Runs body(checkpointer, rank) on both ranks.
  std::vector<absl::Status> Ranks(const CheckpointLayout& layout,
                                  const std::function<absl::Status(Checkpointer&, int)>& body) {
    InMemoryStore store;
    return testing::RunRanks(2, [&](int rank) -> absl::Status {
      auto ctl = testing::ConnectLoopback("ctl", rank, 2, &store);
      if (!ctl.ok()) return ctl.status();
      Checkpointer c(options_, layout, ctl->get());
      return body(c, rank);
    });
  }
  void SaveSteps(std::vector<int64_t> steps) {
    for (const absl::Status& s : Ranks(Layout(), [&](Checkpointer& c, int rank) -> absl::Status {
           for (int64_t step : steps) {
             if (auto s = c.Save(State(step, rank)); !s.ok()) return s;
           }
           if (auto s = c.Flush(); !s.ok()) return s;
           auto committed = c.TakeCommitted();
           if (!committed.has_value() || committed->step != steps.back()) {
             return absl::InternalError("last checkpoint not reported committed");
           }
           return absl::OkStatus();
         })) {
      ASSERT_TRUE(s.ok()) << s;
    }
  }
  // The step both ranks resume from (-1: none), each reading its own file, and rank 1's state.
  int64_t Resume(RankState* loaded = nullptr) {
    std::vector<int64_t> found(2, -2);
    for (const absl::Status& s : Ranks(Layout(), [&](Checkpointer&c, int rank) -> absl::Status {
           auto state = c.Resume(rank);
           if (!state.ok()) return state.status();
           found[rank] = state->has_value() ? (*state)->step : -1;
           if (rank == 1 && loaded != nullptr && state->has_value()) *loaded = **state;
           return absl::OkStatus();
         })) {
      EXPECT_TRUE(s.ok()) << s;
    }
    EXPECT_EQ(found[0], found[1]);
    return found[0];
  }
  std::string dir_;
  CheckpointOptions options_;  // every 10 steps, keep 2; no generation unless a test sets one
};

TEST_F(CheckpointerTest, KeepsTheNewestAndResumesFromIt) {
  EXPECT_EQ(Resume(), -1);
  SaveSteps({10, 20, 30});
  EXPECT_FALSE(fs::exists(dir_ + "/step-00000010"));  // keep = 2
  EXPECT_TRUE(fs::exists(dir_ + "/step-00000020/MANIFEST"));
  RankState loaded;
  EXPECT_EQ(Resume(&loaded), 30);
  EXPECT_EQ(loaded.master, State(30, 1).master);
  EXPECT_EQ(loaded.data_position, 240);
  EXPECT_FALSE(fs::exists(dir_ + "/OWNER"));  // no generation, no claim
}

// A generation claims the directory when it resumes; an older generation of the same job that
// is still running (its node was cut off while the job restarted elsewhere) then neither
// commits nor prunes, and cannot resume either; another job (a resubmission) takes it over.
TEST_F(CheckpointerTest, ANewerGenerationsClaimStopsAnOlderOne) {
  options_.job = "j";
  options_.generation = 1;
  EXPECT_EQ(Resume(), -1);
  SaveSteps({10, 20});
  options_.generation = 2;
  EXPECT_EQ(Resume(), 20);
  EXPECT_EQ(ReadFileContents(dir_ + "/OWNER").value_or(""),
            "ringmaster-checkpoint-owner 1\njob j\ngeneration 2\n");

  options_.generation = 1;  // the old generation goes on
  std::vector<absl::Status> saved = Ranks(Layout(), [&](Checkpointer& c, int rank) {
    if (auto s = c.Save(State(30, rank)); !s.ok()) return s;
    return c.Flush();
  });
  EXPECT_THAT(saved[0].message(), HasSubstr("generation 1 of job j is stale: generation 2 has "
                                            "claimed"));
  EXPECT_THAT(saved[1].message(), HasSubstr("generation 1 of job j is stale: generation 2 has "
                                            "claimed"));
  for (const absl::Status& s : saved) EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_FALSE(fs::exists(dir_ + "/step-00000030"));          // not even a rank's file
  EXPECT_TRUE(fs::exists(dir_ + "/step-00000010/MANIFEST"));  // not pruned by it
  for (const absl::Status& s :
       Ranks(Layout(), [&](Checkpointer&c, int) { return c.Resume(0).status(); })) {
    EXPECT_TRUE(absl::IsAborted(s)) << s;
  }

  options_.generation = 2;  // the current generation commits
  SaveSteps({30});
  options_.job = "j-resubmitted";
  options_.generation = 1;
  EXPECT_EQ(Resume(), 30);
  EXPECT_EQ(ReadFileContents(dir_ + "/OWNER").value_or(""),
            "ringmaster-checkpoint-owner 1\njob j-resubmitted\ngeneration 1\n");

  // The first job's current generation, still running, now stops too (its job ended or moved).
  options_.job = "j";
  options_.generation = 2;
  for (const absl::Status& s : Ranks(Layout(), [&](Checkpointer&c, int rank) {
         if (auto s = c.Save(State(40, rank)); !s.ok()) return s;
         return c.Flush();
       })) {
    EXPECT_TRUE(absl::IsAborted(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("job j-resubmitted has claimed"));
  }
  EXPECT_FALSE(fs::exists(dir_ + "/step-00000040"));
}

// A rank's control group that runs `before_gather` once, as the rank joins its first
// all-gather (a checkpoint's records: after the rank wrote its file, before rank 0 may go on).
class GatherHook final : public Communicator {
 public:
  GatherHook(std::unique_ptr<Communicator> inner, std::function<void()> before_gather)
      : Communicator(inner->name(), inner->rank(), inner->size()),
        inner_(std::move(inner)),
        before_gather_(std::move(before_gather)) {}
  const char* transport() const override { return inner_->transport(); }

 protected:
  absl::Status DoAllReduce(Tensor data) override { return inner_->AllReduce(data); }
  absl::Status DoReduceScatter(Tensor in, Tensor out) override {
    return inner_->ReduceScatter(in, out);
  }
  absl::Status DoAllGather(Tensor in, Tensor out) override {
    if (before_gather_) std::exchange(before_gather_, nullptr)();
    return inner_->AllGather(in, out);
  }
  absl::Status DoBroadcast(Tensor data, int root) override { return inner_->Broadcast(data, root); }
  absl::Status DoSend(Tensor data, int peer) override { return inner_->Send(data, peer); }
  absl::Status DoRecv(Tensor data, int peer) override { return inner_->Recv(data, peer); }
  absl::Status DoExchange(Tensor send, Tensor recv, int peer) override {
    return inner_->Exchange(send, recv, peer);
  }
  absl::Status DoBarrier() override { return inner_->Barrier(); }

 private:
  const std::unique_ptr<Communicator> inner_;
  std::function<void()> before_gather_;
};

// Rank 0 checks the owner again before writing the MANIFEST: a newer generation that claims the
// directory while the ranks write their files (here once both are written, as rank 1 joins the
// gather of their records, which rank 0 cannot leave before) leaves the step uncommitted, with
// nothing pruned, and every rank stops.
TEST_F(CheckpointerTest, AClaimWhileTheFilesAreWrittenLeavesTheStepUncommitted) {
  options_.job = "j";
  options_.generation = 1;
  EXPECT_EQ(Resume(), -1);
  SaveSteps({10, 20});
  InMemoryStore store;
  const std::vector<absl::Status> saved = testing::RunRanks(2, [&](int rank) -> absl::Status {
    auto ctl = testing::ConnectLoopback("ctl", rank, 2, &store);
    if (!ctl.ok()) return ctl.status();
    GatherHook hooked(std::move(*ctl), [&, rank] {
      if (rank != 1) return;
      EXPECT_TRUE(fs::exists(dir_ + "/step-00000030/rank-00001.bin"));
      ASSERT_TRUE(WriteFileDurably(dir_ + "/OWNER", FormatOwner({"j", 2})).ok());
    });
    Checkpointer c(options_, Layout(), &hooked);
    if (auto s = c.Save(State(30, rank)); !s.ok()) return s;
    return c.Flush();
  });
  for (const absl::Status& s : saved) EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_THAT(saved[0].message(), HasSubstr("generation 1 of job j is stale: generation 2 has "
                                            "claimed"));
  EXPECT_THAT(saved[1].message(), HasSubstr("another rank found checkpoint.dir claimed"));
  EXPECT_TRUE(fs::exists(dir_ + "/step-00000030/rank-00000.bin"));
  EXPECT_FALSE(fs::exists(dir_ + "/step-00000030/MANIFEST"));
  EXPECT_TRUE(fs::exists(dir_ + "/step-00000010/MANIFEST"));  // not pruned
}

TEST_F(CheckpointerTest, ACorruptNewestCheckpointFallsBackToThePreviousOne) {
  // Rank 1 finds its own file damaged (same size, wrong CRC-32C) and rank 0 reads its own
  // intact: both move on to step 10 together.
  SaveSteps({10, 20});
  {
    std::fstream f(dir_ + "/step-00000020/rank-00001.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('x');
  }
  EXPECT_EQ(Resume(), 10);
}

TEST_F(CheckpointerTest, OnlyTheFilesTheRanksNeedAreRead) {
  // As in plain data parallelism, both ranks resume from rank 0's file: rank 1's (same size,
  // damaged) is read by no one, so the newest checkpoint stands.
  SaveSteps({10, 20});
  {
    std::fstream f(dir_ + "/step-00000020/rank-00001.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('x');
  }
  std::vector<int64_t> found(2, -2);
  for (const absl::Status& s : Ranks(Layout(), [&](Checkpointer&c, int rank) -> absl::Status {
         auto state = c.Resume(0);
         if (!state.ok()) return state.status();
         found[rank] = state->has_value() ? (*state)->step : -1;
         return absl::OkStatus();
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(found, (std::vector<int64_t>{20, 20}));
}

TEST_F(CheckpointerTest, DamageOnDifferentRanksAtEveryStepLeavesNothingToResume) {
  // Rank 1's newest file and rank 0's older one are damaged: rank 0 proposes both in turn (their
  // sizes are right), and both ranks give up together.
  SaveSteps({10, 20});
  for (const char* file : {"/step-00000020/rank-00001.bin", "/step-00000010/rank-00000.bin"}) {
    std::fstream f(dir_ + file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('x');
  }
  EXPECT_EQ(Resume(), -1);
}

TEST_F(CheckpointerTest, AnIntactFileOfAnotherStepEndsTheResumeOnEveryRank) {
  // Step 20's MANIFEST lists, for rank 1, step 10's file (same size, its own CRC-32C): rank 1
  // finds it intact but not this step's. No older checkpoint would fix that, and a fresh start
  // would lose the run: every rank fails.
  SaveSteps({10, 20});
  const std::string step20 = dir_ + "/step-00000020";
  fs::copy_file(dir_ + "/step-00000010/rank-00001.bin", step20 + "/rank-00001.bin",
                fs::copy_options::overwrite_existing);
  std::ifstream in(step20 + "/MANIFEST");
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<Manifest> manifest = ParseManifest(text.str());
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  absl::StatusOr<ManifestFile> copied = ChecksumFile(step20 + "/rank-00001.bin");
  ASSERT_TRUE(copied.ok()) << copied.status();
  manifest->files[1].crc32c = copied->crc32c;
  ASSERT_TRUE(WriteFileDurably(step20 + "/MANIFEST", FormatManifest(*manifest)).ok());

  std::vector<absl::Status> status =
      Ranks(Layout(), [&](Checkpointer& c, int rank) { return c.Resume(rank).status(); });
  EXPECT_TRUE(absl::IsAborted(status[0])) << status[0];
  EXPECT_THAT(status[0].message(), HasSubstr("another rank could not read its file"));
  EXPECT_TRUE(absl::IsFailedPrecondition(status[1])) << status[1];
  EXPECT_THAT(status[1].message(), HasSubstr("holds step 10"));
}

TEST_F(CheckpointerTest, ATruncatedNewestCheckpointFallsBackToThePreviousOne) {
  SaveSteps({10, 20});
  fs::resize_file(dir_ + "/step-00000020/rank-00000.bin", 100);
  EXPECT_EQ(Resume(), 10);
}

TEST_F(CheckpointerTest, ACheckpointWithoutManifestIsIgnored) {
  SaveSteps({10, 20});
  fs::remove(dir_ + "/step-00000020/MANIFEST");
  EXPECT_EQ(Resume(), 10);
}

TEST_F(CheckpointerTest, AnotherLayoutIsAFatalErrorNotASilentFreshStart) {
  SaveSteps({10});
  CheckpointLayout other = Layout();
  other.zero = 0;
  for (const absl::Status& s :
       Ranks(other, [&](Checkpointer&c, int) -> absl::Status { return c.Resume(0).status(); })) {
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("same layout"));
  }
}

// Makes the checkpoint of `step` fail for `rank` (-1: every rank): a directory where the rank's
// file is written first (its temporary name), or a plain file where the step's directory goes.
void Block(const std::string& dir, int64_t step, int rank) {
  const std::string step_dir = dir + "/" + StepDirName(step);
  if (rank < 0) {
    fs::create_directories(dir);
    std::ofstream(step_dir) << "in the way";
    return;
  }
  fs::create_directories(step_dir + "/" + RankFileName(rank) + ".tmp." +
                         std::to_string(getpid()));
}

// What each rank's Save/Flush of `steps` returned (the first error, else OK) and the failures it
// took (TakeFailures), in order.
struct SaveOutcome {
  absl::Status status;
  std::vector<CheckpointFailure> failures;
  std::vector<int64_t> committed;
};

class CheckpointFailureTest : public CheckpointerTest {
 protected:
  std::vector<SaveOutcome> Save(const std::vector<int64_t>& steps) {
    std::vector<SaveOutcome> out(2);
    Ranks(Layout(), [&](Checkpointer& c, int rank) -> absl::Status {
      SaveOutcome& o = out[rank];
      for (int64_t step : steps) {
        o.status = c.Save(State(step, rank));
        if (o.status.ok()) o.status = c.Flush();
        for (CheckpointFailure& f : c.TakeFailures()) o.failures.push_back(std::move(f));
        if (auto done = c.TakeCommitted()) o.committed.push_back(done->step);
        if (!o.status.ok()) break;
      }
      return o.status;
    });
    return out;
  }
  // The step-* entries left in the directory.
  std::vector<std::string> StepEntries() {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("step-", 0) == 0) names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    return names;
  }
};

// Rank 1 cannot write its file at step 20: the checkpoint is not committed, rank 1 (only) hands
// over the failure with its error, the step's directory is gone (rank 0's complete file with it),
// training goes on, and the next checkpoint commits and resets the count.
TEST_F(CheckpointFailureTest, AFailedSaveIsReportedByTheRankThatFailedAndLeavesNothing) {
  Block(dir_, 20, /*rank=*/1);
  const std::vector<SaveOutcome> out = Save({10, 20, 30});
  for (const SaveOutcome& o : out) {
    EXPECT_TRUE(o.status.ok()) << o.status;  // max_consecutive_failures 0: keep training
    EXPECT_EQ(o.committed, (std::vector<int64_t>{10, 30}));
  }
  EXPECT_TRUE(out[0].failures.empty());
  ASSERT_EQ(out[1].failures.size(), 1u);
  EXPECT_EQ(out[1].failures[0].step, 20);
  EXPECT_EQ(out[1].failures[0].consecutive, 1);
  EXPECT_THAT(out[1].failures[0].error.ToString(), HasSubstr("rank-00001.bin.tmp"));
  EXPECT_EQ(StepEntries(), (std::vector<std::string>{"step-00000010", "step-00000030"}));
}

// Every rank fails (the step's directory cannot be created): each reports, with the count of
// checkpoints in a row; nothing of the failed steps stays.
TEST_F(CheckpointFailureTest, EveryRankReportsAndCountsFailuresInARow) {
  Block(dir_, 10, -1);
  Block(dir_, 20, -1);
  const std::vector<SaveOutcome> out = Save({10, 20});
  for (const SaveOutcome& o : out) {
    EXPECT_TRUE(o.status.ok()) << o.status;
    ASSERT_EQ(o.failures.size(), 2u);
    EXPECT_EQ(o.failures[0].consecutive, 1);
    EXPECT_EQ(o.failures[1].step, 20);
    EXPECT_EQ(o.failures[1].consecutive, 2);
    EXPECT_THAT(o.failures[1].error.message(), HasSubstr("cannot create"));
  }
  EXPECT_TRUE(StepEntries().empty());
}

// max_consecutive_failures 2: two checkpoints in a row that fail end the run on every rank
// (FAILED_PRECONDITION naming checkpoint.dir, the policy and the last error); a commit between
// two failures resets the count.
TEST_F(CheckpointFailureTest, TooManyFailuresInARowFailTheRunOnEveryRank) {
  options_.max_consecutive_failures = 2;
  Block(dir_, 10, -1);
  Block(dir_, 30, 1);
  Block(dir_, 40, 1);
  const std::vector<SaveOutcome> out = Save({10, 20, 30, 40, 50});
  for (int rank : {0, 1}) {
    const absl::Status& s = out[rank].status;
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("checkpoint.dir " + dir_ + ": 2 checkpoints in a row"));
    EXPECT_THAT(s.message(), HasSubstr("checkpoint.max_consecutive_failures is 2"));
    EXPECT_THAT(s.message(), HasSubstr("the last, at step 40"));
    EXPECT_EQ(out[rank].committed, (std::vector<int64_t>{20}));
  }
  // Rank 1 quotes its own error; rank 0, whose file was fine, names the rank that failed.
  EXPECT_THAT(out[1].status.message(), HasSubstr("rank-00001.bin.tmp"));
  EXPECT_THAT(out[0].status.message(), HasSubstr("rank(s) 1 could not write their files"));
  EXPECT_EQ(out[1].failures.back().consecutive, 2);
  EXPECT_EQ(StepEntries(), (std::vector<std::string>{"step-00000020"}));
}

// Leftovers of checkpoints a killed run never committed are removed when the next run resumes;
// the committed ones stay.
TEST_F(CheckpointFailureTest, ResumeSweepsUncommittedDirectories) {
  SaveSteps({10});
  for (const char* leftover : {"/step-00000005", "/step-00000020"}) {
    fs::create_directories(dir_ + leftover);
    std::ofstream(dir_ + leftover + "/rank-00000.bin") << "partial";
  }
  EXPECT_EQ(Resume(), 10);
  EXPECT_EQ(StepEntries(), (std::vector<std::string>{"step-00000010"}));
}

}  // namespace
}  // namespace ringmaster::trainer
