// Every parallel layout against one process, with real ranks (threads over loopback Gloo): the
// same seed, data and global batch must give the same 20-step loss curve as a single rank that
// runs the whole global batch by gradient accumulation, for TP=2, PP=2 (m = 8), TP2xPP2,
// TP2xPP2xDP2 with ZeRO 0-3, and ZeRO-3 must match plain data parallelism (DP=2, and with TP=2)
// while holding fewer bytes.
//
// Tolerance: 1e-5 relative on every step's loss. The layouts add the same terms in another order
// (tensor-parallel partial sums of a matmul, the data-parallel sums of per-replica gradients, the
// tied embedding's two halves), so single-precision rounding (~6e-8 relative per operation)
// separates the runs; over 20 AdamW steps the losses stayed within 1e-7 of each other here
// (printed by the test), so 1e-5 leaves two orders of magnitude for other BLAS kernels. A real
// defect — a missing all-reduce, a gradient counted twice, a stage fed the wrong microbatch —
// moves the loss by 1e-3 or more within a step or two.
#include "trainer/parallel/parallel_trainer.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/comm/gloo_communicator.h"
#include "trainer/comm/testing.h"
#include "trainer/model/cpu_device.h"
#include "trainer/parallel/layout_test_data.h"
#include "trainer/parallel/pipeline_schedule.h"

namespace ringmaster::trainer {
namespace {

constexpr int kSteps = 20;
constexpr int kMicroBatch = 2;
constexpr int kGlobalBatch = 16;
constexpr int kSeq = testing::kLayoutTestSeq;
constexpr double kTolerance = 1e-5;

GptConfig Model() { return testing::LayoutTestModel(); }

struct RankResult {
  RankPlace place;
  absl::Status failure;  // the step that failed (Train stops there), if any
  std::vector<double> losses;
  std::vector<float> params;                          // held_parameters() after the last step
  std::map<std::string, std::vector<float>> tensors;  // the flat buffer by tensor (ZeRO 0-2)
  int64_t state_bytes = 0;
  int max_in_flight = 0;
  size_t stages_reported = 0;
  int64_t layer_gathers = 0;
  int slots = 0;
  int layers = 0;
  std::vector<StepStats> steps;
  // Per step: seconds this rank's training thread spent in testing::WithDelay's operations.
  std::vector<double> operation_seconds;
  std::vector<double> step_wall_seconds;  // each Step() call's wall time
};

// Fault injection: rank `rank`'s loss gradient is NaN in step `step` (0: never).
struct NanGradients {
  int rank = -1;
  int64_t step = 0;
};

// Changes a rank's options before its trainer is created; sees the rank's groups.
using AdjustFn =
    std::function<void(int rank, const ParallelGroups& groups, ParallelTrainerOptions* options)>;

// Sees a rank's trainer once created, before its first step.
using CreatedFn = std::function<void(int rank, ParallelTrainer* trainer)>;

// Trains `steps` steps as every rank of a tp x pp x dp job (threads) and returns each rank's
// result, by rank; a rank whose step fails stops there and records the failure.
// With `link_delay` > 0 every operation of every group takes that much longer (testing::WithDelay),
// as over a slow link.
std::vector<RankResult> Train(int tp, int pp, int dp, int zero, int steps = kSteps,
                              NanGradients nan = {}, const AdjustFn& adjust = nullptr,
                              const CreatedFn& created = nullptr,
                              absl::Duration link_delay = absl::ZeroDuration()) {
  const int world = tp * pp * dp;
  InMemoryStore store;
  std::vector<RankResult> results(world);
  std::vector<absl::Status> statuses = testing::RunRanks(world, [&](int rank) -> absl::Status {
    RankResult& r = results[rank];
    r.place = RankPlace::Of(rank, tp, pp, dp);
    auto network = GlooNetwork::Create("127.0.0.1");
    if (!network.ok()) return network.status();
    auto groups = ConnectParallelGroups(
        r.place,
        [&](const std::string& name, int g,
            int n) -> absl::StatusOr<std::unique_ptr<Communicator>> {
          auto comm = (*network)->Connect(name, g, n, &store, absl::Seconds(60));
          if (!comm.ok() || link_delay <= absl::ZeroDuration()) return comm;
          return testing::WithDelay(std::move(*comm), link_delay);
        });
    if (!groups.ok()) return groups.status();
    auto device = MakeCpuDevice(1);
    ParallelTrainerOptions o;
    o.model = Model();
    o.place = r.place;
    o.micro_batch = kMicroBatch;
    o.microbatches = kGlobalBatch / (kMicroBatch * dp);
    o.zero_stage = zero;
    o.bucket_bytes = 8192;  // several buckets, so bucketing and the tied embedding interleave
    o.adamw = AdamWConfig{0.9, 0.95, 1e-8, 0.1};
    o.clip_grad_norm = 1.0;
    if (rank == nan.rank) o.nan_gradients_at_step = nan.step;
    if (adjust) adjust(rank, *groups, &o);
    auto trainer = ParallelTrainer::Create(device.get(), o, &*groups);
    if (!trainer.ok()) return trainer.status();
    if (created) created(rank, trainer->get());
    if (auto s = (*trainer)->InitParameters(7); !s.ok()) return s;
    for (int step = 0; step < steps; ++step) {
      auto fill = [&](int micro, int32_t* in, int32_t* tgt) {
        for (int b = 0; b < kMicroBatch; ++b) {
          const int64_t g = int64_t{step} * kGlobalBatch + micro * (kMicroBatch * dp) +
                            r.place.dp_rank * kMicroBatch + b;
          testing::LayoutTestSample(g, in + b * kSeq, tgt + b * kSeq);
        }
      };
      const auto start = std::chrono::steady_clock::now();
      const double in_operations = testing::SecondsInDelayedOperations();
      auto stats = (*trainer)->Step(fill, 3e-3f, step + 1);
      if (!stats.ok()) {
        r.failure = stats.status();
        break;
      }
      r.step_wall_seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      r.steps.push_back(*stats);
      r.operation_seconds.push_back(testing::SecondsInDelayedOperations() - in_operations);
      r.losses.push_back(stats->loss);
      r.max_in_flight = std::max(r.max_in_flight, stats->max_in_flight);
      r.stages_reported = stats->stage_compute_seconds.size();
    }
    Tensor held = (*trainer)->held_parameters();
    r.params.assign(held.f32(), held.f32() + held.size);
    if (zero < 3) {
      for (const ParamTensor& t : (*trainer)->model().layout().tensors()) {
        r.tensors[t.name].assign(held.f32() + t.offset, held.f32() + t.offset + t.size);
      }
    } else {
      r.layer_gathers = (*trainer)->data_parallel().source()->layer_gathers();
    }
    r.state_bytes = (*trainer)->state_bytes();
    r.slots = (*trainer)->model().slots();
    r.layers = static_cast<int>((*trainer)->model().layout().layers().size());
    return absl::OkStatus();
  });
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_TRUE(statuses[rank].ok()) << "rank " << rank << ": " << statuses[rank];
  }
  return results;
}

const std::vector<double>& Reference() {
  static const std::vector<double>* losses = [] {
    auto r = Train(1, 1, 1, 0);
    return new std::vector<double>(r[0].losses);
  }();
  return *losses;
}

// Every rank reports the same curve, and it follows `want` within kTolerance.
void ExpectCurve(const std::vector<RankResult>& results, const std::vector<double>& want,
                 const std::string& what) {
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  double worst = 0;
  for (const RankResult& r : results) {
    EXPECT_TRUE(r.failure.ok()) << what << " rank " << r.place.rank << ": " << r.failure;
    ASSERT_EQ(r.losses.size(), static_cast<size_t>(kSteps)) << what << " rank " << r.place.rank;
    EXPECT_EQ(r.losses, results[0].losses) << what << ": rank " << r.place.rank << " differs";
  }
  for (int i = 0; i < kSteps; ++i) {
    const double rel = std::abs(results[0].losses[i] - want[i]) / std::abs(want[i]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, kTolerance) << what << " step " << i + 1 << ": " << results[0].losses[i]
                               << " vs " << want[i];
  }
  std::printf("%-28s loss %.6f -> %.6f, largest relative difference %.2e\n", what.c_str(),
              results[0].losses.front(), results[0].losses.back(), worst);
}

TEST(ParallelTrainerTest, TheReferenceLearns) {
  const std::vector<double>& ref = Reference();
  ASSERT_EQ(ref.size(), static_cast<size_t>(kSteps));
  EXPECT_GT(ref.front(), 3.9);  // about ln(64) = 4.16 at the start
  EXPECT_LT(ref.back(), ref.front() - 0.5);
}

TEST(ParallelTrainerTest, TensorParallelMatchesOneRank) {
  std::vector<RankResult> r = Train(2, 1, 1, 0);
  ExpectCurve(r, Reference(), "TP=2");
  // Replicated tensors (embeddings, LayerNorms, row-parallel biases) stay bit-identical on both
  // TP ranks; split ones hold different slices.
  ParameterLayout layout(Model(), ModelShard{0, 2, 0, 4, true, true});
  int replicated = 0;
  for (const ParamTensor& t : layout.tensors()) {
    if (t.split == TensorSplit::kReplicated) {
      ++replicated;
      EXPECT_EQ(r[0].tensors[t.name], r[1].tensors[t.name]) << t.name;
    } else {
      EXPECT_NE(r[0].tensors[t.name], r[1].tensors[t.name]) << t.name;
    }
  }
  // wte, wpe, lnf.w, lnf.b, and per layer ln1.w, ln1.b, attproj.b, ln2.w, ln2.b, fcproj.b.
  EXPECT_EQ(replicated, 4 + 4 * 6);
}

TEST(ParallelTrainerTest, PipelineMatchesOneRankWithEightMicrobatches) {
  std::vector<RankResult> r = Train(1, 2, 1, 0);
  ExpectCurve(r, Reference(), "PP=2 (m=8)");
  // 1F1B: the first stage holds p = 2 microbatches at most, the last one.
  EXPECT_EQ(r[0].max_in_flight, 2);
  EXPECT_EQ(r[0].slots, 2);
  EXPECT_EQ(r[1].max_in_flight, 1);
  EXPECT_EQ(r[1].slots, 1);
  EXPECT_EQ(r[0].layers, 2);
  EXPECT_EQ(r[1].layers, 2);
  EXPECT_EQ(r[0].stages_reported, 2u);
  // The tied embedding is the same on both ends of the pipeline.
  EXPECT_EQ(r[0].tensors["wte"], r[1].tensors["wte"]);
}

// Four stages of one layer each: two middle stages without the embeddings or the head.
TEST(ParallelTrainerTest, FourStagePipelineMatchesOneRank) {
  std::vector<RankResult> r = Train(1, 4, 1, 0);
  ExpectCurve(r, Reference(), "PP=4 (m=8)");
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(r[s].layers, 1);
    EXPECT_EQ(r[s].max_in_flight, 4 - s) << "stage " << s;
  }
  EXPECT_EQ(r[0].tensors["wte"], r[3].tensors["wte"]);
  EXPECT_EQ(r[1].tensors.count("wte"), 0u);
}

TEST(ParallelTrainerTest, TensorAndPipelineMatchOneRank) {
  std::vector<RankResult> r = Train(2, 2, 1, 0);
  ExpectCurve(r, Reference(), "TP=2 x PP=2");
  EXPECT_EQ(r[0].tensors["wte"], r[2].tensors["wte"]);  // rank 2: tp 0 of the last stage
}

class ThreeDimensionalTest : public ::testing::TestWithParam<int> {};

TEST_P(ThreeDimensionalTest, MatchesOneRank) {
  const int zero = GetParam();
  std::vector<RankResult> r = Train(2, 2, 2, zero);
  ExpectCurve(r, Reference(), "TP=2 x PP=2 x DP=2 ZeRO-" + std::to_string(zero));
  EXPECT_EQ(r[0].max_in_flight, 2);  // m = 4 on each replica
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, ThreeDimensionalTest, ::testing::Values(0, 1, 2, 3));

// ZeRO-3 against plain data parallelism of the same layout, and the memory it saves.
class Zero3Test : public ::testing::TestWithParam<int> {};

TEST_P(Zero3Test, MatchesPlainDataParallelWithFewerBytes) {
  const int tp = GetParam();
  std::vector<RankResult> plain = Train(tp, 1, 2, 0);
  std::vector<RankResult> zero3 = Train(tp, 1, 2, 3);
  const std::string what = "ZeRO-3 DP=2" + std::string(tp > 1 ? " x TP=2" : "");
  ExpectCurve(plain, Reference(), "plain DP=2" + std::string(tp > 1 ? " x TP=2" : ""));
  ExpectCurve(zero3, plain[0].losses, what + " vs plain");
  std::printf("%s: state bytes per rank: plain DP %lld, ZeRO-3 %lld (%.0f%%)\n", what.c_str(),
              static_cast<long long>(plain[0].state_bytes),
              static_cast<long long>(zero3[0].state_bytes),
              100.0 * zero3[0].state_bytes / plain[0].state_bytes);
  for (size_t i = 0; i < zero3.size(); ++i) EXPECT_LT(zero3[i].state_bytes, plain[i].state_bytes);
  // Each layer gathered before its forward and again before its backward, in every microbatch.
  const int m = kGlobalBatch / (kMicroBatch * 2);
  EXPECT_EQ(zero3[0].layer_gathers, int64_t{kSteps} * m * 2 * zero3[0].layers);
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, Zero3Test, ::testing::Values(1, 2));

// A NaN gradient on one rank (the last stage's, in the last data-parallel replica) stops every
// rank in that step, before the update: each fails with the same OUT_OF_RANGE naming the step,
// and holds the parameters of the step before, bit for bit those of a run that stopped there.
// The NaN reaches the others through the data-parallel reduction (or the ZeRO norm), the
// pipeline's backward transfers and the tensor-parallel all-reduces.
struct Layout {
  int tp, pp, dp, zero;
};

// Rank 1's first forward pass ends with 200 ms of injected compute (after_pass), begun once
// rank 0 is blocked in a tensor-parallel all-reduce, which cannot end before rank 1 joins it:
// rank 0 spends those 200 ms waiting, and they count as its tensor-parallel time, not its
// compute (else rank 0 would look as slow as rank 1 to the straggler detector). Every bucket
// of a step is a separate part of it, so they add up to no more than the step's wall time.
TEST(ParallelTrainerTest, APeerWaitingForASlowTensorParallelRankIsNotComputing) {
  constexpr double kInjected = 0.2;
  std::atomic<const Communicator*> rank0_tp{nullptr};
  bool injected = false;
  const AdjustFn adjust = [&](int rank, const ParallelGroups& groups, ParallelTrainerOptions* o) {
    if (rank == 0) rank0_tp = groups.tp.get();
    if (rank != 1) return;
    o->after_pass = [&](double) {
      if (std::exchange(injected, true)) return;
      // Rank 0 set it before its first pass, which rank 1's first pass needed.
      const Communicator* peer = rank0_tp.load();
      while (peer->entered() == peer->completed()) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::duration<double>(kInjected));  // the slowness
    };
  };
  const std::vector<RankResult> results = Train(2, 1, 1, 0, /*steps=*/1, {}, adjust);
  ASSERT_EQ(results.size(), 2u);
  ASSERT_TRUE(injected);
  for (const RankResult& r : results) ASSERT_EQ(r.steps.size(), 1u) << r.place.rank;
  EXPECT_GE(results[0].steps[0].pass_comm_seconds, kInjected);
  EXPECT_GE(results[1].steps[0].compute_seconds, kInjected);
  for (const RankResult& r : results) {
    const StepStats& s = r.steps[0];
    EXPECT_LE(s.compute_seconds + s.pass_comm_seconds + s.pipeline_wait_seconds + s.reduce_seconds +
                  s.optimizer_seconds,
              r.step_wall_seconds[0])
        << "rank " << r.place.rank << " computes " << s.compute_seconds << " s, waits "
        << s.pass_comm_seconds << " s";
  }
}

// The same with two data-parallel ranks: rank 1's first forward pass ends with 200 ms of
// injected compute, begun once rank 0 is blocked waiting for its communication thread, which is
// in a collective that rank 1 has not entered (rank 1 has nothing under way or queued then: its
// forward pass waited for its gathers, and the reductions come in the backward pass). ZeRO-2
// and 3 wait inside the pass (a layer's workspace still being reduced, a layer's gather): those
// 200 ms count as rank 0's communication, not its compute. ZeRO-0 and 1 reduce after the
// passes and wait there.
class DataParallelWaitTest : public ::testing::TestWithParam<int> {};

TEST_P(DataParallelWaitTest, APeerWaitingForASlowRankIsNotComputing) {
  constexpr double kInjected = 0.2;
  const int zero = GetParam();
  std::atomic<const Communicator*> dp_of[2] = {nullptr, nullptr};
  std::atomic<ParallelTrainer*> rank0{nullptr};
  bool injected = false;
  const AdjustFn adjust = [&](int rank, const ParallelGroups& groups, ParallelTrainerOptions* o) {
    dp_of[rank] = groups.dp.get();
    if (rank != 1) return;
    o->after_pass = [&](double) {
      if (std::exchange(injected, true)) return;
      const Communicator* peer = dp_of[0].load();
      const Communicator* own = dp_of[1].load();
      while (peer->entered() <= own->entered()) std::this_thread::yield();
      // Rank 0 created its trainer before entering any collective.
      CommQueue* queue = rank0.load()->data_parallel().queue();
      while (!queue->blocked()) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::duration<double>(kInjected));  // the slowness
    };
  };
  const CreatedFn created = [&](int rank, ParallelTrainer* trainer) {
    if (rank == 0) rank0 = trainer;
  };
  const std::vector<RankResult> results = Train(1, 1, 2, zero, /*steps=*/1, {}, adjust, created);
  ASSERT_EQ(results.size(), 2u);
  ASSERT_TRUE(injected);
  for (const RankResult& r : results) ASSERT_EQ(r.steps.size(), 1u) << r.place.rank;
  const StepStats& waiter = results[0].steps[0];
  EXPECT_GE(zero >= 2 ? waiter.pass_comm_seconds : waiter.reduce_seconds, kInjected);
  EXPECT_GE(results[1].steps[0].compute_seconds, kInjected);
  for (const RankResult& r : results) {
    const StepStats& s = r.steps[0];
    EXPECT_LE(s.compute_seconds + s.pass_comm_seconds + s.reduce_seconds + s.optimizer_seconds,
              r.step_wall_seconds[0])
        << "rank " << r.place.rank << " computes " << s.compute_seconds << " s, waits "
        << s.pass_comm_seconds << " s in the passes";
  }
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, DataParallelWaitTest, ::testing::Values(0, 1, 2, 3));

// Every operation of every group 5 ms slower, as over a slow link: each rank's step counts all
// the time its training thread spent in operations as communication (StepStats::comm_seconds),
// in every phase — the pipeline's transfers, the tensor-parallel all-reduces in the passes, the
// tied embedding's gradient sum, the norm's sums, the loss and stage times shared over the
// pipeline, the tied embedding's parameter broadcast, ZeRO's gathers — so none of it is compute
// (wall - comm_seconds) that the straggler detector would hold against the rank. (Its waits for
// the communication thread come on top: DataParallelWaitTest.) A phase left out would miss at
// least its 5 ms delay, more than the compute a phase's own bookkeeping could add.
class SlowLinkTest : public ::testing::TestWithParam<Layout> {};

TEST_P(SlowLinkTest, TimeOnASlowLinkIsCommunicationNotCompute) {
  const auto [tp, pp, dp, zero] = GetParam();
  const std::vector<RankResult> results =
      Train(tp, pp, dp, zero, /*steps=*/2, {}, nullptr, nullptr, absl::Milliseconds(5));
  ASSERT_EQ(results.size(), static_cast<size_t>(tp * pp * dp));
  for (const RankResult& r : results) {
    ASSERT_EQ(r.steps.size(), 2u) << r.place.rank;
    for (size_t i = 0; i < r.steps.size(); ++i) {
      const StepStats& s = r.steps[i];
      // Plain data parallelism runs every operation on the communication thread.
      if (tp > 1 || pp > 1 || zero > 0) EXPECT_GT(r.operation_seconds[i], 0) << r.place.rank;
      EXPECT_GE(s.comm_seconds, r.operation_seconds[i])
          << "rank " << r.place.rank << " step " << i + 1 << ": " << r.operation_seconds[i]
          << " s in operations over the slow link, but only " << s.comm_seconds
          << " s counted as communication: the rest would count as compute";
      EXPECT_LE(s.comm_seconds, r.step_wall_seconds[i]) << "rank " << r.place.rank;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, SlowLinkTest,
                         ::testing::Values(Layout{1, 2, 1, 0}, Layout{2, 1, 1, 0},
                                           Layout{1, 1, 2, 0}, Layout{1, 1, 2, 1},
                                           Layout{1, 1, 2, 2}, Layout{1, 1, 2, 3},
                                           Layout{1, 2, 2, 1}));

class NonFiniteStepTest : public ::testing::TestWithParam<Layout> {};

TEST_P(NonFiniteStepTest, StopsEveryRankBeforeTheUpdate) {
  const auto [tp, pp, dp, zero] = GetParam();
  const int world = tp * pp * dp;
  int nan_rank = -1;
  for (int rank = 0; rank < world; ++rank) {
    const RankPlace place = RankPlace::Of(rank, tp, pp, dp);
    if (place.pp_rank == pp - 1 && place.dp_rank == dp - 1 && nan_rank < 0) nan_rank = rank;
  }
  ASSERT_GE(nan_rank, 0);
  const std::vector<RankResult> stopped = Train(tp, pp, dp, zero, /*steps=*/2);
  const std::vector<RankResult> failed =
      Train(tp, pp, dp, zero, /*steps=*/4, NanGradients{nan_rank, /*step=*/3});
  ASSERT_EQ(failed.size(), static_cast<size_t>(world));
  for (int rank = 0; rank < world; ++rank) {
    const RankResult& r = failed[rank];
    EXPECT_EQ(r.failure.code(), absl::StatusCode::kOutOfRange)
        << "rank " << rank << ": " << r.failure;
    EXPECT_THAT(std::string(r.failure.message()),
                ::testing::StartsWith("step 3: the gradient norm is nan (loss "))
        << "rank " << rank;
    EXPECT_THAT(std::string(r.failure.message()),
                ::testing::HasSubstr("the update was not applied, the parameters are those of "
                                     "step 2"))
        << "rank " << rank;
    EXPECT_EQ(r.losses, stopped[rank].losses) << "rank " << rank;
    EXPECT_EQ(r.params, stopped[rank].params) << "rank " << rank << ": the update was applied";
    for (float v : r.params) ASSERT_TRUE(std::isfinite(v)) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, NonFiniteStepTest,
                         ::testing::Values(Layout{1, 1, 2, 0}, Layout{1, 1, 2, 1},
                                           Layout{1, 1, 2, 3}, Layout{2, 2, 1, 0},
                                           Layout{2, 2, 2, 2}),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           const Layout& l = info.param;
                           return absl::StrCat("TP", l.tp, "xPP", l.pp, "xDP", l.dp, "Zero",
                                               l.zero);
                         });

}  // namespace
}  // namespace ringmaster::trainer
