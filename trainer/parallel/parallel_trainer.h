// One rank of a GPT training job in any TP x PP x DP layout with ZeRO 0-3 on the data-parallel
// dimension: the model shard (pipeline_partition.h picks the stage's layers), its data
// parallelism, and the optimizer step with the 1F1B pipeline schedule (pipeline_schedule.h).
// The trainer binary (trainer.cc) adds data, checkpoints and reports; tests drive it with ranks
// as threads.
//
// A step (Step()): zero gradients; run this stage's 1F1B actions for the step's m microbatches —
// forward and backward passes (tensor-parallel all-reduces inside them), activations and
// gradients exchanged with the neighbouring stages, data-parallel reductions issued as gradients
// become final, the tied embedding's gradient summed between the first and last stage; wait for
// the reductions; the whole model's gradient norm; clip; AdamW (ZeRO: gathers); the loss, which
// only the last stage computes, broadcast over the pipeline so every rank reports the same.
//
// Equivalence: with the same seed, data and global batch, every layout computes the same model
// as one process, up to float rounding of sums taken in another order (tensor-parallel partial
// sums, data-parallel reductions, the tied embedding's two halves).
//
// Not thread-safe: one training thread calls everything. Borrows the device and the groups,
// which must outlive it.
#ifndef RINGMASTER_TRAINER_PARALLEL_PARALLEL_TRAINER_H_
#define RINGMASTER_TRAINER_PARALLEL_PARALLEL_TRAINER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/model/gpt.h"
#include "trainer/optim/adamw_optimizer.h"
#include "trainer/parallel/data_parallel.h"
#include "trainer/parallel/parallel_groups.h"

namespace ringmaster::trainer {

// The largest gradient norm a step may have: its square must fit a float, in which the sharded
// layouts sum it over their groups (a larger one would read as NaN there). Any layout stops at
// a larger one, so they all behave alike.
inline constexpr double kLargestGradNorm = 1.8e19;  // just below sqrt(FLT_MAX)

struct ParallelTrainerOptions {
  GptConfig model;
  RankPlace place;
  int micro_batch = 1;   // sequences per microbatch
  int microbatches = 1;  // m: microbatches per optimizer step on each data-parallel rank
  int zero_stage = 0;    // 0-3
  int64_t bucket_bytes = 4 << 20;
  AdamWConfig adamw;
  double clip_grad_norm = 0;  // 0: no clipping
  // Fault injection (trainer --nan_gradients_at_step): in this step this rank's loss gradient is
  // NaN, as a corrupted activation would make it; 0: never. Only a last pipeline stage's rank
  // has a loss gradient.
  int64_t nan_gradients_at_step = 0;
  // Fault injection (trainer --slow_rank): called after each forward or backward pass with the
  // pass's compute seconds; its own time counts as compute, as a slow device's would. Null: none.
  std::function<void(double compute_seconds)> after_pass;
};

// Writes microbatch `micro` (0..m-1) of the current step for this rank's data-parallel replica:
// B*T inputs and B*T targets.
using MicrobatchFn = std::function<void(int micro, int32_t* inputs, int32_t* targets)>;

struct StepStats {
  double loss = 0;             // mean loss over the step's global batch (the same on every rank)
  double grad_norm = 0;        // before clipping
  // This stage's forward and backward passes, less the time they were blocked in communication
  // (pass_comm_seconds): what a slow rank stretches and a peer waiting for it does not.
  double compute_seconds = 0;
  // Blocked in communication inside the passes: tensor-parallel all-reduces, ZeRO-3's layer
  // gathers and ZeRO-2's reductions still holding a region's buffer.
  double pass_comm_seconds = 0;
  double pipeline_wait_seconds = 0;    // blocked in transfers to and from neighbouring stages
  double reduce_seconds = 0;           // waiting for the gradient reductions and the norm
  double optimizer_seconds = 0;        // AdamW, parameter gathers, the tied embedding's sync
  // The whole step's time blocked in communication, in every phase and transport: the growth of
  // Communicator::ThreadSeconds over Step (every operation this thread ran, the pipeline's
  // transfers, the loss and stage times shared over the pipeline, the norm's sums, the tied
  // embedding's sync, and its waits for the communication thread). The step's wall time less
  // this is its compute: what the straggler detector compares, so a rank that waits for a slow
  // peer or a slow link does not look slow itself.
  double comm_seconds = 0;
  std::vector<double> stage_compute_seconds;  // every stage's compute, by stage (pipeline)
  int max_in_flight = 0;                      // microbatches this stage held at once
};

class ParallelTrainer {
 public:
  // INVALID_ARGUMENT naming the field for a layout the model cannot be split into
  // (parallelism.tensor must divide model.heads; parallelism.pipeline at most model.layers;
  // trainer.zero_stage 0-3), or groups that do not match `options.place`.
  static absl::StatusOr<std::unique_ptr<ParallelTrainer>> Create(
      Device* device, const ParallelTrainerOptions& options, const ParallelGroups* groups);

  // The GPT-2 initialisation of `seed` (the same model in every layout).
  absl::Status InitParameters(uint64_t seed);
  // One optimizer step at learning rate `lr`, step number t (1-based). Errors are the
  // communicators' (retryable) or the model's. OUT_OF_RANGE (not retryable: a restart from the
  // checkpoint would repeat it) when the step's gradient norm or loss is not finite (a norm
  // above kLargestGradNorm counts as not finite): the update is not applied, so the parameters
  // and optimizer state stay those of step t - 1. Every rank returns it in the same step: the
  // loss is summed over the data-parallel group and broadcast over the pipeline, the norm summed
  // over the groups that split the gradients, and without ZeRO every data-parallel rank takes
  // its norm from the same all-reduced gradients, so a NaN anywhere reaches every rank's norm.
  absl::StatusOr<StepStats> Step(const MicrobatchFn& fill, float lr, int64_t t);
  // After restoring owned optimizer state (data_parallel().optimizer().LoadState): rebuilds
  // every copy of the parameters (ZeRO gathers, tied embedding).
  absl::Status AfterLoad() { return dp_->GatherParameters(); }

  // Whether this rank's optimizer state is the model's (plain DP: data-parallel rank 0 of each
  // model shard; ZeRO: every rank its own part).
  bool holds_model_state() const { return options_.zero_stage > 0 || options_.place.dp_rank == 0; }
  // This rank's parameters: the flat buffer, or the ZeRO-3 shard.
  Tensor held_parameters() const;
  // Bytes of parameters, gradients and optimizer state this rank holds.
  int64_t state_bytes() const { return dp_->state_bytes(); }
  Gpt& model() { return *model_; }
  DataParallel& data_parallel() { return *dp_; }
  const ParallelTrainerOptions& options() const { return options_; }

 private:
  ParallelTrainer(Device* device, const ParallelTrainerOptions& options,
                  const ParallelGroups* groups)
      : device_(device), options_(options), groups_(groups) {}
  // This stage's 1F1B actions for one step; fills `stats` (compute, waits, in-flight).
  absl::Status RunSchedule(const MicrobatchFn& fill, int64_t t, StepStats* stats);
  // Adds a forward or backward pass begun at `start` to `stats`: its time blocked in
  // communication (ThreadSeconds() past `comm_before`) apart from its compute, then any
  // injected slowness (after_pass) as compute.
  void CountPass(std::chrono::steady_clock::time_point start, double comm_before,
                 StepStats* stats) const;
  // The step's loss on every rank (the last stage computed it) and every stage's compute time.
  absl::Status ShareLossAndStageTimes(StepStats* stats);

  Device* const device_;
  const ParallelTrainerOptions options_;
  const ParallelGroups* const groups_;
  std::unique_ptr<Gpt> model_;
  std::unique_ptr<DataParallel> dp_;
  float group_loss_ = 0;  // summed over the data-parallel group on its communication thread
  std::vector<int32_t> inputs_, targets_;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_PARALLEL_PARALLEL_TRAINER_H_
