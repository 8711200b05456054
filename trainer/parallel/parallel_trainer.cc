#include "trainer/parallel/parallel_trainer.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "trainer/model/pipeline_partition.h"
#include "trainer/parallel/pipeline_schedule.h"

namespace ringmaster::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

absl::Status CheckGroup(const Communicator* comm, const char* what, int rank, int size) {
  if (comm == nullptr || comm->rank() != rank || comm->size() != size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " group must have this rank at ", rank, " of ", size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParallelTrainer>> ParallelTrainer::Create(
    Device* device, const ParallelTrainerOptions& options, const ParallelGroups* groups) {
  const RankPlace& p = options.place;
  if (options.zero_stage < 0 || options.zero_stage > 3) {
    return FieldError("trainer.zero_stage",
                      absl::StrCat("must be 0, 1, 2 or 3, got ", options.zero_stage));
  }
  if (options.microbatches < 1) {
    return FieldError("trainer.batch.global_batch",
                      absl::StrCat("must give every data-parallel rank at least one microbatch, "
                                   "got ",
                                   options.microbatches));
  }
  ASSIGN_OR_RETURN(ModelShard shard,
                   MakeModelShard(options.model, p.tp_rank, p.tp, p.pp_rank, p.pp));
  RETURN_IF_ERROR(CheckGroup(groups->tp.get(), "tensor", p.tp_rank, p.tp));
  RETURN_IF_ERROR(CheckGroup(groups->pp.get(), "pipeline", p.pp_rank, p.pp));
  RETURN_IF_ERROR(CheckGroup(groups->dp.get(), "data", p.dp_rank, p.dp));
  const bool tied = p.pp > 1 && (p.first_stage() || p.last_stage());
  if (tied) {
    RETURN_IF_ERROR(CheckGroup(groups->emb.get(), "tied-embedding", p.first_stage() ? 0 : 1, 2));
  }
  std::unique_ptr<ParallelTrainer> t(new ParallelTrainer(device, options, groups));
  ParameterLayout layout(options.model, shard);
  GptOptions g;
  g.batch = options.micro_batch;
  g.seq_len = options.model.seq_len;
  g.buffer_size = PaddedSize(layout.size(), p.dp);
  g.own_parameters = options.zero_stage < 3;
  g.own_gradients = options.zero_stage < 2;
  g.slots = PipelineSlots(p.pp_rank, p.pp, options.microbatches);
  g.tensor_parallel = groups->tp.get();
  ASSIGN_OR_RETURN(t->model_, Gpt::Create(device, std::move(layout), g));
  DataParallelOptions d;
  d.zero_stage = options.zero_stage;
  d.bucket_bytes = options.bucket_bytes;
  d.tied_embedding = tied ? groups->emb.get() : nullptr;
  d.model_groups = {groups->tp.get(), groups->pp.get()};
  ASSIGN_OR_RETURN(t->dp_,
                   DataParallel::Create(device, groups->dp.get(), t->model_->layout(),
                                        t->model_->params(), t->model_->grads(), d, options.adamw));
  t->model_->SetGradientSink(t->dp_->sink());
  t->model_->SetParameterSource(t->dp_->source());
  const size_t tokens = static_cast<size_t>(options.micro_batch) * options.model.seq_len;
  t->inputs_.resize(tokens);
  t->targets_.resize(tokens);
  return t;
}

absl::Status ParallelTrainer::InitParameters(uint64_t seed) {
  RETURN_IF_ERROR(model_->InitParameters(seed));
  RETURN_IF_ERROR(dp_->GatherParameters());
  // The optimizer was created with the model, from parameters still zero: with bf16 working
  // weights its fp32 masters are a separate copy, which must start from the initialised ones.
  dp_->optimizer().ResetMastersFromParameters();
  return device_->Synchronize();
}

Tensor ParallelTrainer::held_parameters() const {
  return options_.zero_stage == 3 ? dp_->source()->shard() : model_->params();
}

absl::Status ParallelTrainer::RunSchedule(const MicrobatchFn& fill, int64_t t, StepStats* stats) {
  const RankPlace& p = options_.place;
  const int m = options_.microbatches;
  const int slots = model_->slots();
  const bool head = model_->layout().shard().has_head;
  const float dloss = t == options_.nan_gradients_at_step ? std::numeric_limits<float>::quiet_NaN()
                                                          : 1.0f / static_cast<float>(m * p.dp);
  Communicator* pp = groups_->pp.get();
  const int prev = p.pp_rank - 1, next = p.pp_rank + 1;
  double loss_sum = 0;
  int in_flight = 0;
  for (const PipelineAction& a : OneForwardOneBackward(p.pp_rank, p.pp, m)) {
    const int slot = a.microbatch % slots;
    const auto start = Clock::now();
    const double comm_before = Communicator::ThreadSeconds();
    absl::Status s;
    switch (a.kind) {
      case PipelineActionKind::kForward: {
        fill(a.microbatch, inputs_.data(), targets_.data());
        ASSIGN_OR_RETURN(double loss,
                         model_->Forward(slot, inputs_.data(), targets_.data(), dloss));
        CountPass(start, comm_before, stats);
        stats->max_in_flight = std::max(stats->max_in_flight, ++in_flight);
        if (head) {
          loss_sum += loss;
          if (a.microbatch + 1 == m) {
            // The step's mean loss over the data-parallel group, summed on the communication
            // thread while the last backward pass runs.
            group_loss_ = static_cast<float>(loss_sum / m / p.dp);
            dp_->SumAsync(&group_loss_);
          }
        }
        continue;
      }
      case PipelineActionKind::kBackward:
        dp_->BeginMicrobatch(a.microbatch + 1 == m);
        RETURN_IF_ERROR(
            model_->Backward(slot, [this](int64_t low) { dp_->OnGradientsFinal(low); }));
        CountPass(start, comm_before, stats);
        --in_flight;
        continue;
      case PipelineActionKind::kRecvForward:
        s = pp->Recv(model_->stage_input(slot), prev);
        break;
      case PipelineActionKind::kSendForward:
        s = pp->Send(model_->stage_output(slot), next);
        break;
      case PipelineActionKind::kSendForwardRecvBackward:
        s = pp->Exchange(model_->stage_output(slot), model_->output_gradient(), next);
        break;
      case PipelineActionKind::kRecvBackward:
        s = pp->Recv(model_->output_gradient(), next);
        break;
      case PipelineActionKind::kSendBackward:
        s = pp->Send(model_->input_gradient(), prev);
        break;
      case PipelineActionKind::kSendBackwardRecvForward:
        s = pp->Exchange(model_->input_gradient(), model_->stage_input(a.other % slots), prev);
        break;
    }
    RETURN_IF_ERROR(s);
    stats->pipeline_wait_seconds += Since(start);
  }
  return absl::OkStatus();
}

void ParallelTrainer::CountPass(Clock::time_point start, double comm_before,
                                StepStats* stats) const {
  const double blocked = Communicator::ThreadSeconds() - comm_before;
  double compute = std::max(0.0, Since(start) - blocked);
  if (options_.after_pass) {
    const auto injected = Clock::now();
    options_.after_pass(compute);
    compute += Since(injected);
  }
  stats->compute_seconds += compute;
  stats->pass_comm_seconds += blocked;
}

absl::StatusOr<StepStats> ParallelTrainer::Step(const MicrobatchFn& fill, float lr, int64_t t) {
  StepStats stats;
  const double comm_before = Communicator::ThreadSeconds();
  model_->ZeroGradients();
  dp_->BeginStep();
  group_loss_ = 0;
  RETURN_IF_ERROR(RunSchedule(fill, t, &stats));

  auto start = Clock::now();
  RETURN_IF_ERROR(dp_->FinishReduction());
  ASSIGN_OR_RETURN(stats.grad_norm, dp_->GradientNorm());
  stats.reduce_seconds = Since(start);
  RETURN_IF_ERROR(ShareLossAndStageTimes(&stats));
  if (!(stats.grad_norm <= kLargestGradNorm) || !std::isfinite(stats.loss)) {
    // AdamW would spread the NaN into every parameter and moment, and the next checkpoint would
    // hold them: stop before the update, with the newest checkpoint still a good one.
    return absl::OutOfRangeError(absl::StrFormat(
        "step %d: the gradient norm is %g (loss %.9g): the update was not applied, the "
        "parameters are those of step %d; a restart would repeat it (lower "
        "trainer.optimizer.lr or check the data)",
        t, stats.grad_norm, stats.loss, t - 1));
  }
  const double clip = options_.clip_grad_norm;
  const float scale =
      clip > 0 && stats.grad_norm > clip ? static_cast<float>(clip / stats.grad_norm) : 1.0f;
  start = Clock::now();
  RETURN_IF_ERROR(dp_->Step(lr, t, scale));
  stats.optimizer_seconds = Since(start);
  stats.comm_seconds = Communicator::ThreadSeconds() - comm_before;
  return stats;
}

absl::Status ParallelTrainer::ShareLossAndStageTimes(StepStats* stats) {
  const RankPlace& p = options_.place;
  float loss = group_loss_;
  if (p.pp > 1) {
    // Only the last stage computed it.
    Communicator* pp = groups_->pp.get();
    RETURN_IF_ERROR(pp->Broadcast(Tensor{&loss, 1, DType::kF32}, p.pp - 1));
    std::vector<float> times(p.pp);
    float mine = static_cast<float>(stats->compute_seconds);
    RETURN_IF_ERROR(
        pp->AllGather(Tensor{&mine, 1, DType::kF32}, Tensor{times.data(), p.pp, DType::kF32}));
    stats->stage_compute_seconds.assign(times.begin(), times.end());
  } else {
    stats->stage_compute_seconds = {stats->compute_seconds};
  }
  stats->loss = loss;
  return absl::OkStatus();
}

}  // namespace ringmaster::trainer
