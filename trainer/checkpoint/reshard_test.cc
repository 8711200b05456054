// Resharding a checkpoint across data-parallel degrees (reshard.h): for every a -> b in
// {1, 2, 4} and every ZeRO stage, the new ranks' states put back together give the original
// optimizer state (master, m, v) element for element, padding never reaches the state, and the
// partition the trainer's DataParallel uses is the one the resharding assumes; then the
// Checkpointer resumes a checkpoint of another degree through it, and refuses other changes.
#include "trainer/checkpoint/reshard.h"

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/checkpointer.h"
#include "trainer/checkpoint/state_partition.h"
#include "trainer/comm/testing.h"
#include "trainer/model/cpu_device.h"
#include "trainer/model/pipeline_partition.h"
#include "trainer/parallel/buckets.h"
#include "trainer/parallel/data_parallel.h"

namespace ringmaster::trainer {
namespace {

using ::testing::HasSubstr;

// What padding positions of an old state hold: never a value a real element has, and not zero,
// so that a copied padding element shows.
constexpr float kPaddingSentinel = -12345.0f;
constexpr int64_t kBucket = 1000;  // ZeRO-1 bucket elements: several buckets per shard

// d_model 24 and seq_len 15: shard sizes that are no multiple of 16, so every degree pads.
GptConfig Model() { return *GptConfig::Create(2, 24, 4, 15, 64); }

// One (tp, pp) position's model shard, its partition and its original full state.
struct Shard {
  ParameterLayout layout;
  ModelStatePartition partition;
  std::vector<float> master, m, v;  // params() elements each
  int64_t params() const { return layout.size(); }
};

struct Job {
  int tp = 1, pp = 1, zero = 0;
  std::vector<Shard> shards;  // by pp_rank * tp + tp_rank

  Job(int tp_, int pp_, int zero_) : tp(tp_), pp(pp_), zero(zero_) {
    const GptConfig config = Model();
    for (int p = 0; p < pp; ++p) {
      for (int t = 0; t < tp; ++t) {
        ParameterLayout layout(config, *MakeModelShard(config, t, tp, p, pp));
        Shard s{layout, ModelStatePartition(layout, zero), {}, {}, {}};
        const int id = p * tp + t;
        for (int64_t i = 0; i < s.params(); ++i) {
          s.master.push_back(id * 1e5f + static_cast<float>(i) + 0.25f);
          s.m.push_back(-1.0f - id - 0.5f * static_cast<float>(i));
          s.v.push_back(1.0f + id + 0.125f * static_cast<float>(i));
        }
        shards.push_back(std::move(s));
      }
    }
  }
  const Shard& ShardOf(int rank) const { return shards[rank % (tp * pp)]; }
  int64_t Bucket(int64_t elements) const { return zero == 1 ? elements : 0; }
  // Rank `rank`'s own layout at `dp`.
  CheckpointLayout LayoutOf(int rank, int dp, int64_t bucket = kBucket) const {
    const Shard& s = ShardOf(rank);
    return {tp * pp * dp, tp, pp, dp, zero, s.params(), s.partition.Padded(dp), Bucket(bucket)};
  }
  // Every rank's state at `dp`, as the trainer saves it, but with padding set to the sentinel.
  std::vector<RankState> Save(int dp, int64_t bucket = kBucket) const {
    std::vector<RankState> out;
    for (int rank = 0; rank < tp * pp * dp; ++rank) {
      const Shard& s = ShardOf(rank);
      const int d = rank / (tp * pp);
      RankState st;
      st.step = 30;
      st.data_position = 480;
      st.data_seed = 7;
      st.lr_scale_start = 24;
      st.lr_scale_from = 1;
      st.lr_scale_to = 0.5;
      if (zero > 0 || d == 0) {
        for (const StateRange& r : s.partition.Owned(d, dp, Bucket(bucket))) {
          for (int64_t o = r.offset; o < r.offset + r.size; ++o) {
            const bool real = o < s.params();
            st.master.push_back(real ? s.master[o] : kPaddingSentinel);
            st.m.push_back(real ? s.m[o] : kPaddingSentinel);
            st.v.push_back(real ? s.v[o] : kPaddingSentinel);
          }
        }
      }
      out.push_back(std::move(st));
    }
    return out;
  }
};

// Reshards `old` (saved at DP=a, bucket `old_bucket`) to DP=b (bucket `new_bucket`); returns the
// new ranks' states.
std::vector<RankState> Reshard(const Job& job, const std::vector<RankState>& old, int a, int b,
                               int64_t old_bucket = kBucket, int64_t new_bucket = kBucket,
                               int* files_read = nullptr) {
  const CheckpointLayout saved = job.LayoutOf(0, a, old_bucket);
  std::vector<RankState> out;
  for (int rank = 0; rank < job.tp * job.pp * b; ++rank) {
    const CheckpointLayout now = job.LayoutOf(rank, b, new_bucket);
    absl::StatusOr<ReshardPlan> plan =
        PlanReshard(saved, now, rank, job.ShardOf(rank).partition);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return {};
    absl::StatusOr<RankState> state =
        AssembleState(*plan, [&](const ReshardSource& s) -> absl::StatusOr<RankState> {
          // The header the old file carries is its own rank's layout.
          EXPECT_EQ(s.layout.ToString(), job.LayoutOf(s.rank, a, old_bucket).ToString());
          if (files_read != nullptr) ++*files_read;
          return old[s.rank];
        });
    EXPECT_TRUE(state.ok()) << state.status();
    if (!state.ok()) return {};
    out.push_back(std::move(*state));
  }
  return out;
}

// Puts the new ranks' states back together and compares them with the original, element for
// element; every padding position of a new state must be zero.
void ExpectOriginal(const Job& job, const std::vector<RankState>& states, int b,
                    int64_t bucket = kBucket) {
  ASSERT_EQ(static_cast<int>(states.size()), job.tp * job.pp * b);
  for (int shard = 0; shard < job.tp * job.pp; ++shard) {
    const Shard& s = job.shards[shard];
    std::vector<float> master(s.params(), 0), m(s.params(), 0), v(s.params(), 0);
    std::vector<int> seen(s.params(), 0);
    for (int d = 0; d < b; ++d) {
      const RankState& st = states[d * job.tp * job.pp + shard];
      EXPECT_EQ(st.step, 30);
      EXPECT_EQ(st.data_position, 480);
      EXPECT_EQ(st.data_seed, 7u);
      EXPECT_EQ(st.lr_scale_start, 24);  // the learning-rate ramp carries over
      EXPECT_EQ(st.lr_scale_to, 0.5);
      const std::vector<StateRange> owned = s.partition.Owned(d, b, job.Bucket(bucket));
      int64_t at = 0, padding = 0;
      for (const StateRange& r : owned) {
        for (int64_t o = r.offset; o < r.offset + r.size; ++o, ++at) {
          ASSERT_LT(at, static_cast<int64_t>(st.master.size()));
          if (o >= s.params()) {
            padding += st.master[at] != 0 || st.m[at] != 0 || st.v[at] != 0;
            continue;
          }
          // Plain DP: every rank holds all of it; count one copy.
          if (job.zero > 0 || d == 0) ++seen[o];
          if (job.zero == 0 && d > 0) {
            ASSERT_EQ(st.master[at], master[o]) << "rank " << d << " offset " << o;
            continue;
          }
          master[o] = st.master[at];
          m[o] = st.m[at];
          v[o] = st.v[at];
        }
      }
      EXPECT_EQ(at, static_cast<int64_t>(st.master.size()));
      EXPECT_EQ(padding, 0) << "padding leaked into DP rank " << d << "'s state";
    }
    for (int64_t o = 0; o < s.params(); ++o) {
      ASSERT_EQ(seen[o], 1) << "shard " << shard << " offset " << o;
      ASSERT_EQ(master[o], s.master[o]) << "shard " << shard << " offset " << o;
      ASSERT_EQ(m[o], s.m[o]) << "shard " << shard << " offset " << o;
      ASSERT_EQ(v[o], s.v[o]) << "shard " << shard << " offset " << o;
    }
  }
}

// (tp, pp, zero, a, b)
class ReshardTest
    : public ::testing::TestWithParam<std::tuple<std::pair<int, int>, int, int, int>> {};

TEST_P(ReshardTest, ReassembledStateEqualsTheOriginalWithoutPadding) {
  const auto [tp_pp, zero, a, b] = GetParam();
  const Job job(tp_pp.first, tp_pp.second, zero);
  int files = 0;
  const std::vector<RankState> now = Reshard(job, job.Save(a), a, b, kBucket, kBucket, &files);
  ExpectOriginal(job, now, b);
  // Each new rank reads only what it needs: one file under plain DP (the old DP rank 0's of its
  // position) and at the same degree (its own).
  if (zero == 0 || a == b) {
    EXPECT_EQ(files, job.tp * job.pp * b);
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryDegreeAndStage, ReshardTest,
    ::testing::Combine(::testing::Values(std::make_pair(1, 1)), ::testing::Values(0, 1, 2, 3),
                       ::testing::Values(1, 2, 4), ::testing::Values(1, 2, 4)));
INSTANTIATE_TEST_SUITE_P(
    TensorOrPipelineFixed, ReshardTest,
    ::testing::Combine(::testing::Values(std::make_pair(2, 1), std::make_pair(1, 2)),
                       ::testing::Values(0, 1, 2, 3), ::testing::Values(1, 4),
                       ::testing::Values(2)));

// ZeRO-1's chunks follow the buckets: a run with another bucket size (or a checkpoint that did
// not record it: the run's own is assumed) is resharded like another degree.
TEST(ReshardBucketsTest, AnotherBucketSizeAndAnUnrecordedOneReshard) {
  const Job job(1, 1, 1);
  ExpectOriginal(job, Reshard(job, job.Save(2, 1000), 2, 2, 1000, 3000), 2, 3000);
  ExpectOriginal(job, Reshard(job, job.Save(4, 3000), 4, 2, 3000, 1000), 2, 1000);
  // A checkpoint without "bucket": its partition is taken to be the run's.
  const CheckpointLayout legacy = {2, 1, 1, 2, 1, job.shards[0].params(),
                                   job.shards[0].partition.Padded(2), 0};
  absl::StatusOr<ReshardPlan> plan =
      PlanReshard(legacy, job.LayoutOf(0, 1, 1000), 0, job.shards[0].partition);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<RankState> old = job.Save(2, 1000);
  absl::StatusOr<RankState> state = AssembleState(
      *plan, [&](const ReshardSource& s) -> absl::StatusOr<RankState> { return old[s.rank]; });
  ASSERT_TRUE(state.ok()) << state.status();
  ExpectOriginal(job, {*state}, 1, 1000);
}

TEST(ReshardRefusalTest, OnlyTheDataParallelDegreeMayDiffer) {
  const Job job(1, 1, 1);
  const CheckpointLayout saved = job.LayoutOf(0, 2);
  EXPECT_TRUE(CheckReshardable(saved, job.LayoutOf(0, 4)).ok());
  struct Case {
    const char* field;
    void (*change)(CheckpointLayout&);
  };
  const Case cases[] = {
      {"tp (checkpoint 1, this run 2)", [](CheckpointLayout& l) { l.tp = 2, l.world *= 2; }},
      {"pp (checkpoint 1, this run 2)", [](CheckpointLayout& l) { l.pp = 2, l.world *= 2; }},
      {"zero (checkpoint 1, this run 2)", [](CheckpointLayout& l) { l.zero = 2; }},
      {"params (checkpoint", [](CheckpointLayout& l) { l.params += 16; }},
      {"this run's world 3 (not tp*pp*dp)", [](CheckpointLayout& l) { l.world = 3; }},
  };
  for (const Case& c : cases) {
    CheckpointLayout now = job.LayoutOf(0, 4);
    c.change(now);
    const absl::Status s = CheckReshardable(saved, now);
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << c.field << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
    EXPECT_THAT(s.message(), HasSubstr("only the data-parallel degree"));
  }
  // A file whose state has another size than its partition says.
  absl::StatusOr<ReshardPlan> plan = PlanReshard(saved, job.LayoutOf(0, 1), 0,
                                                 job.shards[0].partition);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const absl::Status short_file =
      AssembleState(*plan, [&](const ReshardSource&) -> absl::StatusOr<RankState> {
        RankState st;
        st.master.resize(3);
        st.m.resize(3);
        st.v.resize(3);
        return st;
      }).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(short_file)) << short_file;
}

// The Checkpointer writes a checkpoint at DP=2 through real files and ranks (threads over
// loopback Gloo) and resumes it at DP=1 and DP=4; without a partition, or with another ZeRO
// stage, it refuses, naming what differs.
class CheckpointerReshardTest : public ::testing::TestWithParam<int> {
 protected:
  // Each rank's Resume() at `dp`, with `zero` (default: the job's), with or without partition.
  std::vector<absl::StatusOr<std::optional<RankState>>> Resume(const Job& job, int dp,
                                                               bool partition, int zero = -1) {
    InMemoryStore store;
    const int world = job.tp * job.pp * dp;
    std::vector<absl::StatusOr<std::optional<RankState>>> out(world, absl::UnknownError(""));
    testing::RunRanks(world, [&](int rank) -> absl::Status {
      ASSIGN_OR_RETURN(auto ctl, testing::ConnectLoopback("ctl", rank, world, &store));
      CheckpointLayout layout = job.LayoutOf(rank, dp);
      if (zero >= 0) layout.zero = zero;
      Checkpointer c(options_, layout, ctl.get(),
                     partition ? &job.ShardOf(rank).partition : nullptr);
      out[rank] = c.Resume(job.zero > 0 ? rank : rank % (job.tp * job.pp));
      return absl::OkStatus();
    });
    return out;
  }
  CheckpointOptions options_;
};

TEST_P(CheckpointerReshardTest, ResumesAtAnotherDegreeThroughTheFiles) {
  const Job job(1, 1, GetParam());
  options_.dir = absl::StrCat(::testing::TempDir(), "/reshard-", GetParam());
  options_.every_steps = 10;
  const std::vector<RankState> saved = job.Save(2);
  InMemoryStore store;
  for (const absl::Status& s : testing::RunRanks(2, [&](int rank) -> absl::Status {
         ASSIGN_OR_RETURN(auto ctl, testing::ConnectLoopback("ctl", rank, 2, &store));
         Checkpointer c(options_, job.LayoutOf(rank, 2), ctl.get());
         RETURN_IF_ERROR(c.Save(saved[rank]));
         return c.Flush();
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  for (int dp : {1, 4}) {
    std::vector<RankState> states;
    for (auto& r : Resume(job, dp, /*partition=*/true)) {
      ASSERT_TRUE(r.ok()) << "dp " << dp << ": " << r.status();
      ASSERT_TRUE(r->has_value()) << "dp " << dp;
      states.push_back(std::move(**r));
    }
    ExpectOriginal(job, states, dp);
  }
  for (auto& r : Resume(job, 1, /*partition=*/false)) {
    EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  }
  const int other = GetParam() == 3 ? 2 : 3;
  for (auto& r : Resume(job, 1, /*partition=*/true, other)) {
    EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  }
  const auto refused = Resume(job, 1, /*partition=*/true, other);
  EXPECT_THAT(refused[0].status().message(),
              HasSubstr(absl::StrCat("zero (checkpoint ", GetParam(), ", this run ", other, ")")));
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, CheckpointerReshardTest, ::testing::Values(0, 1, 2, 3));

// A ZeRO-1 checkpoint written before the bucket was recorded (no " bucket=" in its MANIFEST and
// headers), resumed at the same degree by a run whose layout records it: the same layout, read
// as it is, so no partition is needed (the reshard path would refuse without one).
TEST(CheckpointerLegacyBucketTest, AnUnrecordedBucketAtTheSameDegreeIsNotResharded) {
  const Job job(1, 1, 1);
  CheckpointOptions options;
  options.dir = absl::StrCat(::testing::TempDir(), "/legacy-bucket");
  options.every_steps = 10;
  const std::vector<RankState> saved = job.Save(2);
  InMemoryStore store;
  for (const absl::Status& s : testing::RunRanks(2, [&](int rank) -> absl::Status {
         ASSIGN_OR_RETURN(auto ctl, testing::ConnectLoopback("ctl", rank, 2, &store));
         Checkpointer c(options, job.LayoutOf(rank, 2, /*bucket=*/0), ctl.get());
         RETURN_IF_ERROR(c.Save(saved[rank]));
         return c.Flush();
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  InMemoryStore resume_store;
  std::vector<RankState> states(2);
  for (const absl::Status& s : testing::RunRanks(2, [&](int rank) -> absl::Status {
         ASSIGN_OR_RETURN(auto ctl, testing::ConnectLoopback("ctl", rank, 2, &resume_store));
         const CheckpointLayout now = job.LayoutOf(rank, 2);
         EXPECT_NE(now.bucket, 0);
         Checkpointer c(options, now, ctl.get(), /*partition=*/nullptr);
         ASSIGN_OR_RETURN(std::optional<RankState> state, c.Resume(rank));
         if (!state.has_value()) return absl::NotFoundError("nothing resumed");
         states[rank] = std::move(*state);
         return absl::OkStatus();
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(states[rank].step, saved[rank].step);
    EXPECT_EQ(states[rank].master, saved[rank].master) << "rank " << rank;
    EXPECT_EQ(states[rank].v, saved[rank].v) << "rank " << rank;
  }
  EXPECT_TRUE(SameLayout(job.LayoutOf(0, 2, 0), job.LayoutOf(0, 2)));
  EXPECT_FALSE(SameLayout(job.LayoutOf(0, 2, 3000), job.LayoutOf(0, 2)));
  EXPECT_FALSE(SameLayout(job.LayoutOf(0, 4, 0), job.LayoutOf(0, 2)));
}

// The partition the resharding assumes is the one DataParallel's optimizer uses, at every stage.
class PartitionTest : public ::testing::TestWithParam<int> {};

TEST_P(PartitionTest, MatchesTheDataParallelOptimizersOwnedRanges) {
  const int zero = GetParam();
  constexpr int kRanks = 2;
  const GptConfig config = Model();
  const ParameterLayout layout(config, ModelShard::WholeModel(config));
  const ModelStatePartition partition(layout, zero);
  InMemoryStore store;
  std::vector<std::vector<FlatRange>> owned(kRanks);
  int64_t bucket = 0;
  auto statuses = testing::RunRanks(kRanks, [&](int rank) -> absl::Status {
    auto device = MakeCpuDevice(1);
    auto comm = testing::ConnectLoopback("dp", rank, kRanks, &store);
    if (!comm.ok()) return comm.status();
    const int64_t padded = PaddedSize(layout.size(), kRanks);
    ASSIGN_OR_RETURN(DeviceBuffer p, device->Allocate(padded, DType::kF32));
    ASSIGN_OR_RETURN(DeviceBuffer g, device->Allocate(padded, DType::kF32));
    ASSIGN_OR_RETURN(auto dp, DataParallel::Create(device.get(), comm->get(), layout, p.tensor(),
                                                   g.tensor(), {zero, 4 * kBucket}, {}));
    owned[rank] = dp->optimizer().owned();
    if (rank == 0) bucket = dp->bucket_elements();
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(bucket, kBucket);
  for (int rank = 0; rank < kRanks; ++rank) {
    const std::vector<StateRange> mine = partition.Owned(rank, kRanks, kBucket);
    ASSERT_EQ(mine.size(), owned[rank].size()) << "rank " << rank;
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_EQ(mine[i].offset, owned[rank][i].offset) << "rank " << rank << " range " << i;
      EXPECT_EQ(mine[i].size, owned[rank][i].size) << "rank " << rank << " range " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, PartitionTest, ::testing::Values(0, 1, 2, 3));

}  // namespace
}  // namespace ringmaster::trainer
