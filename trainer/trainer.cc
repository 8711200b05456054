#include "trainer/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "trainer/checkpoint/checkpointer.h"
#include "trainer/checkpoint/crc32c.h"
#include "trainer/comm/connect_group.h"
#include "trainer/comm/gloo_communicator.h"
#include "trainer/cpu_peak.h"
#include "trainer/data/data_loader.h"
#include "trainer/model/blas_kernels.h"
#include "trainer/model/cpu_device.h"
#include "trainer/model/gpt.h"
#include "trainer/parallel/data_parallel.h"
#include "trainer/worker/collective_reporter.h"
#include "trainer/worker/step_report.h"

namespace ringmaster::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Everything one run holds, in construction order (destroyed in reverse).
class Run {
 public:
  Run(const TrainerConfig& config, AgentClient* agent) : c_(config), agent_(agent) {}

  absl::Status Setup();
  // Restore() (the newest checkpoint, or a fresh model), timed.
  absl::Status Resume();
  absl::Status Restore();
  absl::Status Train();

 private:
  absl::Status Phase(v1::WorkerPhase phase, const std::optional<CommittedCheckpoint>& done = {});
  absl::Status Checkpoint(int64_t step);
  absl::Status Report(int64_t step, double loss, double seconds, double comm_seconds,
                      double compute_seconds);
  // Stretches this rank's compute when it is the configured slow rank (straggler tests).
  void MaybeSlowDown(double compute_seconds);

  const TrainerConfig& c_;
  AgentClient* const agent_;
  InMemoryStore local_store_;
  std::shared_ptr<GlooNetwork> network_;
  std::unique_ptr<Communicator> world_, dp_comm_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Gpt> model_;
  std::unique_ptr<DataLoader> loader_;
  std::unique_ptr<DataParallel> dp_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<CollectiveReporter> collective_reporter_;
  CheckpointLayout layout_;
  // Startup figures for the first step report of the process.
  double rendezvous_seconds_ = 0;
  double restore_seconds_ = 0;
  bool first_report_ = true;
  int64_t start_step_ = 0;
  double peak_flops_ = 0;
  std::vector<int32_t> inputs_, targets_;
};

absl::Status Run::Phase(v1::WorkerPhase phase, const std::optional<CommittedCheckpoint>& done) {
  if (agent_ == nullptr || !c_.flags.report_metrics) return absl::OkStatus();
  v1::ReportPhaseRequest request;
  request.set_phase(phase);
  if (done.has_value()) {
    request.set_checkpoint_step(done->step);
    request.set_checkpoint_seconds(done->seconds);
  }
  return agent_->ReportPhase(request);
}

absl::Status Run::Setup() {
  const RankPlace& p = c_.place;
  KeyValueStore* store = agent_ != nullptr ? static_cast<KeyValueStore*>(agent_) : &local_store_;
  ASSIGN_OR_RETURN(network_, GlooNetwork::Create(c_.host_address));
  ASSIGN_OR_RETURN(world_, network_->Connect("world", p.rank, p.world, store,
                                             c_.flags.comm_timeout));
  const std::string dp_name = absl::StrCat("dp", p.pp_rank * p.tp + p.tp_rank);
  ASSIGN_OR_RETURN(dp_comm_, ConnectGroup(*network_, dp_name, p.dp_rank, p.dp, store,
                                          c_.flags.comm_timeout, c_.flags.shared_memory));
  rendezvous_seconds_ = absl::ToDoubleSeconds(absl::Now() - c_.process_start);
  if (agent_ != nullptr && c_.flags.report_metrics) {
    collective_reporter_ = std::make_unique<CollectiveReporter>(
        agent_, std::vector<const Communicator*>{world_.get(), dp_comm_.get()},
        absl::Milliseconds(500));
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = c_.flags.blas_threads > 0
                          ? c_.flags.blas_threads
                          : std::max(1, static_cast<int>(cores) / std::max(1, c_.local_world));
  device_ = MakeCpuDevice(threads);

  ParameterLayout layout(c_.model, ModelShard::WholeModel(c_.model));
  const int64_t padded = PaddedSize(layout.size(), p.dp);
  ASSIGN_OR_RETURN(model_, Gpt::Create(device_.get(), layout, c_.micro_batch,
                                       c_.model.seq_len, padded,
                                       /*own_gradients=*/c_.zero_stage < 2));
  std::shared_ptr<const TokenSource> source;
  if (c_.data_path.empty()) {
    source = BuiltinCorpus();
  } else {
    ASSIGN_OR_RETURN(std::unique_ptr<TokenSource> file, OpenTokenFile(c_.data_path));
    source = std::move(file);
  }
  if (source->vocab_needed() > c_.model.vocab) {
    return FieldError("trainer.model.vocab",
                      absl::StrCat("must be at least ", source->vocab_needed(), " for ",
                                   source->description(), ", got ", c_.model.vocab));
  }
  ASSIGN_OR_RETURN(loader_, DataLoader::Create(source, {c_.model.seq_len, c_.micro_batch,
                                                        p.dp_rank, p.dp, c_.data_seed}));
  ASSIGN_OR_RETURN(dp_, DataParallel::Create(device_.get(), dp_comm_.get(), model_->layout(),
                                             model_->params(), model_->grads(),
                                             {c_.zero_stage, c_.flags.bucket_bytes}, c_.adamw));
  model_->SetGradientSink(dp_->sink());
  layout_ = CheckpointLayout{p.world, p.tp, p.pp, p.dp, c_.zero_stage, layout.size(), padded};
  checkpointer_ = std::make_unique<Checkpointer>(c_.checkpoint, layout_, world_.get());
  inputs_.resize(static_cast<size_t>(c_.micro_batch) * c_.model.seq_len);
  targets_.resize(inputs_.size());
  peak_flops_ = c_.flags.peak_flops;
  if (peak_flops_ <= 0) {
    const CpuPeak peak = EstimateCpuPeak();
    peak_flops_ = peak.flops_per_core * threads;
    RM_LOG(INFO) << "MFU against the CPU's peak " << peak.explanation << " x " << threads
                 << " thread(s)";
  }
  RM_LOG(INFO) << "rank " << p.rank << "/" << p.world << " pid " << getpid() << " (dp "
               << p.dp_rank << "/" << p.dp
               << ", zero " << c_.zero_stage << "): " << c_.model.ToString() << "; "
               << source->description() << "; " << c_.micro_steps << " microbatch(es) of "
               << c_.micro_batch << " per step; " << dp_->buckets().size() << " gradient bucket(s); "
               << threads << " BLAS thread(s) (OpenBLAS " << OpenBlasCoreName() << " kernels)";
  return absl::OkStatus();
}

absl::Status Run::Resume() {
  const auto start = Clock::now();
  absl::Status resumed = Restore();
  restore_seconds_ = Since(start);
  return resumed;
}

absl::Status Run::Restore() {
  int64_t step = -1;
  if (!c_.checkpoint.dir.empty()) {
    ASSIGN_OR_RETURN(step, checkpointer_->FindResumeStep());
  }
  if (step < 0) {
    RETURN_IF_ERROR(model_->InitParameters(c_.data_seed));
    RM_LOG(INFO) << "no checkpoint to resume from: starting at step 0";
    return absl::OkStatus();
  }
  const RankPlace& p = c_.place;
  // Plain DP: the model state is in data-parallel rank 0's file of this (tp, pp) position; ZeRO:
  // in this rank's own file.
  const int source = c_.zero_stage > 0 ? p.rank : p.pp_rank * p.tp + p.tp_rank;
  ASSIGN_OR_RETURN(RankState state, checkpointer_->Load(step, source));
  if (state.data_seed != c_.data_seed) {
    return FieldError("trainer.data.seed",
                      absl::StrCat("is ", c_.data_seed, " but the checkpoint at step ", step,
                                   " was trained with ", state.data_seed));
  }
  if (static_cast<int64_t>(state.master.size()) != dp_->optimizer().state_size()) {
    return absl::DataLossError(absl::StrCat("checkpoint at step ", step, " holds ",
                                            state.master.size(), " state elements, want ",
                                            dp_->optimizer().state_size()));
  }
  RETURN_IF_ERROR(
      dp_->optimizer().LoadState(state.master.data(), state.m.data(), state.v.data()));
  if (c_.zero_stage > 0) RETURN_IF_ERROR(dp_->GatherParameters());
  loader_->set_position(state.data_position);
  start_step_ = state.step;
  RM_LOG(INFO) << "resumed from the checkpoint at step " << step << " (data position "
               << state.data_position << ")";
  return absl::OkStatus();
}

absl::Status Run::Checkpoint(int64_t step) {
  RETURN_IF_ERROR(Phase(v1::WORKER_PHASE_CHECKPOINT));
  RankState state;
  state.step = step;
  state.data_position = loader_->position();
  state.data_seed = c_.data_seed;
  const bool holds_model = c_.zero_stage > 0 || c_.place.dp_rank == 0;
  if (holds_model) {
    const int64_t n = dp_->optimizer().state_size();
    state.master.resize(n);
    state.m.resize(n);
    state.v.resize(n);
    RETURN_IF_ERROR(
        dp_->optimizer().SaveState(state.master.data(), state.m.data(), state.v.data()));
  }
  RETURN_IF_ERROR(checkpointer_->Save(std::move(state)));
  return Phase(v1::WORKER_PHASE_STEP);
}

void Run::MaybeSlowDown(double compute_seconds) {
  if (c_.place.rank != c_.flags.slow_rank || c_.flags.slow_factor <= 1) return;
  std::this_thread::sleep_for(
      std::chrono::duration<double>(compute_seconds * (c_.flags.slow_factor - 1)));
}

absl::Status Run::Report(int64_t step, double loss, double seconds, double comm_seconds,
                         double compute_seconds) {
  const int64_t tokens = int64_t{c_.micro_steps} * c_.micro_batch * c_.model.seq_len;
  const double mfu =
      peak_flops_ > 0 ? c_.model.FlopsPerToken() * tokens / seconds / peak_flops_ : 0;
  std::printf("step %lld/%lld loss %.9g tok/s %.0f step_ms %.1f comm_ms %.1f mfu %.3f\n",
              static_cast<long long>(step), static_cast<long long>(c_.steps), loss,
              tokens / seconds, seconds * 1e3, comm_seconds * 1e3, mfu);
  std::fflush(stdout);
  if (agent_ == nullptr || !c_.flags.report_metrics) return absl::OkStatus();
  if (std::optional<CommittedCheckpoint> done = checkpointer_->TakeCommitted()) {
    RETURN_IF_ERROR(Phase(v1::WORKER_PHASE_STEP, done));
  }
  v1::ReportStepRequest r;
  r.set_step(step);
  r.set_loss(loss);
  r.set_tokens(tokens);
  r.set_step_seconds(seconds);
  r.set_compute_seconds(compute_seconds);
  r.set_comm_seconds(comm_seconds);
  r.set_mfu(mfu);
  r.set_state_bytes(dp_->state_bytes());
  r.set_end_time_unix_nanos(absl::ToUnixNanos(absl::Now()));
  if (first_report_) {
    first_report_ = false;
    r.set_process_start_unix_nanos(absl::ToUnixNanos(c_.process_start));
    r.set_rendezvous_seconds(rendezvous_seconds_);
    r.set_restore_seconds(restore_seconds_);
    r.set_start_step(start_step_);
  }
  AddCollectiveStats(*dp_comm_, &r);
  AddCollectiveStats(*world_, &r);
  return agent_->ReportStep(r);
}

absl::Status Run::Train() {
  RETURN_IF_ERROR(Phase(v1::WORKER_PHASE_STEP));
  const float dloss = 1.0f / static_cast<float>(c_.micro_steps * c_.place.dp);
  double loss = 0;
  for (int64_t step = start_step_; step < c_.steps; ++step) {
    const auto start = Clock::now();
    double comm = 0;
    model_->ZeroGradients();
    dp_->BeginStep();
    double loss_sum = 0;
    float group_loss = 0;  // summed over the DP group on the communication thread
    for (int micro = 0; micro < c_.micro_steps; ++micro) {
      const auto micro_start = Clock::now();
      loader_->Fill(micro, inputs_.data(), targets_.data());
      ASSIGN_OR_RETURN(double micro_loss, model_->Forward(inputs_.data(), targets_.data(), dloss));
      loss_sum += micro_loss;
      const bool last = micro + 1 == c_.micro_steps;
      if (last) {
        group_loss = static_cast<float>(loss_sum / c_.micro_steps / c_.place.dp);
        dp_->SumAsync(&group_loss);
      }
      dp_->BeginMicrobatch(last);
      RETURN_IF_ERROR(model_->Backward([this](int64_t low) { dp_->OnGradientsFinal(low); }));
      MaybeSlowDown(Since(micro_start));
    }
    auto comm_start = Clock::now();
    RETURN_IF_ERROR(dp_->FinishReduction());
    // The step's mean loss over the whole data-parallel group (the same on every replica).
    loss = group_loss;
    ASSIGN_OR_RETURN(double norm, dp_->GradientNorm());
    comm += Since(comm_start);
    const double clip = c_.clip_grad_norm;
    const float scale = clip > 0 && norm > clip ? static_cast<float>(clip / norm) : 1.0f;
    const float lr = static_cast<float>(c_.schedule.At(step));
    comm_start = Clock::now();
    RETURN_IF_ERROR(dp_->Step(lr, step + 1, scale));
    if (c_.zero_stage > 0) comm += Since(comm_start);
    loader_->Advance(c_.micro_steps);
    const double seconds = Since(start);
    RETURN_IF_ERROR(Report(step + 1, loss, seconds, comm, seconds - comm));
    if (checkpointer_->Due(step + 1) && !c_.checkpoint.dir.empty()) {
      RETURN_IF_ERROR(Checkpoint(step + 1));
    }
    if (step + 1 == c_.flags.exit_after_step) {
      RETURN_IF_ERROR(checkpointer_->Flush());
      return absl::UnavailableError(absl::StrCat("injected failure after step ", step + 1,
                                                 " (--exit_after_step)"));
    }
  }
  RETURN_IF_ERROR(checkpointer_->Flush());
  if (std::optional<CommittedCheckpoint> done = checkpointer_->TakeCommitted()) {
    RETURN_IF_ERROR(Phase(v1::WORKER_PHASE_STEP, done));
  }
  std::vector<float> params(static_cast<size_t>(model_->params().size));
  RETURN_IF_ERROR(device_->CopyToHost(params.data(), model_->params()));
  std::printf("training done: %lld steps, final loss %.9g, params crc32c %08x\n",
              static_cast<long long>(c_.steps), loss,
              Crc32c(0, params.data(), params.size() * sizeof(float)));
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace

absl::Status RunTraining(const TrainerConfig& config, AgentClient* agent) {
  Run run(config, agent);
  RETURN_IF_ERROR(run.Setup());
  RETURN_IF_ERROR(run.Resume());
  return run.Train();
}

}  // namespace ringmaster::trainer
