#include "trainer/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "trainer/checkpoint/checkpointer.h"
#include "trainer/checkpoint/crc32c.h"
#include "trainer/checkpoint/state_partition.h"
#include "trainer/comm/connect_group.h"
#include "trainer/comm/gloo_communicator.h"
#include "trainer/cpu_peak.h"
#include "trainer/cuda/accelerator.h"
#include "trainer/data/data_loader.h"
#include "trainer/link_check.h"
#include "trainer/model/blas_kernels.h"
#include "trainer/model/cpu_device.h"
#include "trainer/parallel/parallel_trainer.h"
#include "trainer/parallel/pipeline_schedule.h"
#include "trainer/stop_request.h"
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
  // The link check (WatchdogSpec.link_check_*, link_check.h) over this rank's groups that cross
  // a link (not those in one machine's shared memory): logged and reported to the agent, with
  // `step` (0 at the start; else the step every rank agreed to run it after, on request). A link
  // that delivered wrong data fails the run (UNAVAILABLE: the job restarts, and a node that
  // fails twice is placed elsewhere).
  absl::Status CheckLinks(int64_t step);
  // Restore() (the newest checkpoint, or a fresh model), timed.
  absl::Status Resume();
  absl::Status Restore();
  absl::Status Train();
  // After a failure, before the teardown: nothing torn down waits for peers that may be gone
  // (queued reductions are skipped, NCCL communicators aborted instead of finalized), so the
  // rank exits, and the job restarts, without waiting out collective timeouts.
  void Abandon();
  // Whether the run ended in StopAfter (ABORTED after a stop every rank agreed to).
  bool stopped_on_request() const { return stopped_on_request_; }

 private:
  absl::Status Phase(v1::WorkerPhase phase, const std::optional<CommittedCheckpoint>& done = {});
  absl::Status Checkpoint(int64_t step);
  // Waits for the checkpoint being written and reports its commit (or failure) to the agent.
  absl::Status FlushCheckpoint();
  // Reports the checkpoints this rank could not save (Checkpointer::TakeFailures) to the agent,
  // which forwards them to the coordinator (a "checkpoint_failed" event and counter).
  absl::Status ReportCheckpointFailures();
  // Every rank agreed to stop after `step` (a SIGUSR1 reached one of them): checkpoints it unless
  // the periodic checkpoint just did, waits for the commit, and returns ABORTED (exit 75, so the
  // job goes on from that checkpoint).
  absl::Status StopAfter(int64_t step);
  // The step's line on stdout ("... lr X": the learning rate the step used) and its report.
  absl::Status Report(int64_t step, const StepStats& stats, double seconds, float lr);
  // Logs the learning-rate factor and its ramp, unless it is the identity.
  void LogLrScale() const;

  const TrainerConfig& c_;
  AgentClient* const agent_;
  InMemoryStore local_store_;
  std::shared_ptr<GlooNetwork> network_;
  // The GPU when the agent assigned one (declared before the communicators it must outlive).
  std::unique_ptr<Accelerator> accelerator_;
  std::unique_ptr<Communicator> world_;
  ParallelGroups groups_;
  std::unique_ptr<Device> cpu_device_;
  Device* device_ = nullptr;  // the accelerator's or cpu_device_
  std::unique_ptr<ParallelTrainer> trainer_;
  std::unique_ptr<DataLoader> loader_;
  // This rank's model shard's state partition, for resuming at another data-parallel degree.
  std::unique_ptr<ModelStatePartition> state_partition_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<CollectiveReporter> collective_reporter_;
  CheckpointLayout layout_;
  // Startup figures for the first step report of the process.
  double rendezvous_seconds_ = 0;
  double restore_seconds_ = 0;
  bool first_report_ = true;
  bool stopped_on_request_ = false;
  int64_t start_step_ = 0;
  // The learning-rate factor (elastic_batch per_replica; else the identity), from the resumed
  // checkpoint's ramp retargeted at this run's degree (Restore), saved with each checkpoint.
  LrScaleRamp lr_scale_;
  double peak_flops_ = 0;
  Clock::time_point training_since_ = Clock::now();  // reset as the first step starts
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
  // Every rank joins the groups in the same order: world, then tp, pp, dp (and emb). The world
  // group carries only the checkpoints' small agreements, so it is a ring: a full mesh of every
  // rank would put world^2 addresses through the coordinator's store.
  ASSIGN_OR_RETURN(world_,
                   network_->ConnectRing("world", p.rank, p.world, store, c_.flags.comm_timeout));
  // A GPU named by CUDA_VISIBLE_DEVICES: its groups use NCCL (the world group stays on Gloo: the
  // checkpoint writer thread uses it with host data). Otherwise groups whose members all run on
  // this machine and node do their collectives in shared memory, the others over Gloo.
  const v1::Precision precision = c_.spec.trainer().precision();
  // Unset, attention is fused where the kernels take the shape (the device chooses).
  const v1::Attention attention = c_.spec.trainer().attention();
  ASSIGN_OR_RETURN(accelerator_,
                   OpenAccelerator(ProcessEnvironment(),
                                   precision == v1::PRECISION_FP32 ? DType::kF32 : DType::kBF16,
                                   attention != v1::ATTENTION_MATERIALIZED));
  if (accelerator_ == nullptr && precision == v1::PRECISION_BF16) {
    return FieldError(
        "trainer.precision",
        "bf16 needs a GPU, and this rank has none (CUDA_VISIBLE_DEVICES names no GPU, "
        "or the trainer was built without CUDA); the CPU trainer computes in fp32");
  }
  if (accelerator_ == nullptr && attention == v1::ATTENTION_FUSED) {
    return FieldError("trainer.attention",
                      "fused needs a GPU, and this rank has none (CUDA_VISIBLE_DEVICES names no "
                      "GPU, or the trainer was built without CUDA); the CPU trainer materializes "
                      "attention");
  }
  ASSIGN_OR_RETURN(groups_,
                   ConnectParallelGroups(p, [&](const std::string& name, int rank, int size) {
                     if (accelerator_ != nullptr) {
                       return accelerator_->Connect(name, rank, size, store,
                                                    c_.flags.comm_timeout);
                     }
                     return ConnectGroup(*network_, name, rank, size, store,
                                         c_.flags.comm_timeout, c_.flags.shared_memory, c_.node);
                   }));
  rendezvous_seconds_ = absl::ToDoubleSeconds(absl::Now() - c_.process_start);
  if (agent_ != nullptr && c_.flags.report_metrics) {
    std::vector<const Communicator*> reported = {world_.get()};
    for (Communicator* group : groups_.all()) reported.push_back(group);
    collective_reporter_ =
        std::make_unique<CollectiveReporter>(agent_, std::move(reported), absl::Milliseconds(500));
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = c_.flags.blas_threads > 0
                          ? c_.flags.blas_threads
                          : std::max(1, static_cast<int>(cores) / std::max(1, c_.local_world));
  if (accelerator_ != nullptr) {
    device_ = accelerator_->device();
    const v1::ModelSpec& m = c_.spec.trainer().model();
    RM_LOG(INFO) << "training on " << accelerator_->description() << "; attention "
                 << device_->AttentionKind(m.d_model(), m.heads());
  } else {
    cpu_device_ = MakeCpuDevice(threads);
    device_ = cpu_device_.get();
  }

  ParallelTrainerOptions o;
  o.model = c_.model;
  o.place = p;
  o.micro_batch = c_.micro_batch;
  o.microbatches = c_.micro_steps;
  o.zero_stage = c_.zero_stage;
  o.bucket_bytes = c_.flags.bucket_bytes;
  o.adamw = c_.adamw;
  o.clip_grad_norm = c_.clip_grad_norm;
  const int nan_rank = c_.flags.nan_gradients_rank;
  if (nan_rank < 0 || nan_rank == c_.place.rank) {
    o.nan_gradients_at_step = c_.flags.nan_gradients_at_step;
  }
  if (c_.place.rank == c_.flags.slow_rank && c_.flags.slow_factor > 1) {
    // Inside the passes, where a slow device loses its time: tensor-parallel peers then wait
    // for this rank in their all-reduces, the others in the pipeline and the reductions.
    o.after_pass = [this, extra = c_.flags.slow_factor - 1](double compute_seconds) {
      if (Since(training_since_) < c_.flags.slow_after_seconds) return;
      std::this_thread::sleep_for(std::chrono::duration<double>(compute_seconds * extra));
    };
  }
  ASSIGN_OR_RETURN(trainer_, ParallelTrainer::Create(device_, o, &groups_));
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
  const ParameterLayout& layout = trainer_->model().layout();
  // params/padded are this rank's model shard's; each rank file carries its own layout.
  layout_ = CheckpointLayout{
      p.world, p.tp, p.pp, p.dp, c_.zero_stage, layout.size(), PaddedSize(layout.size(), p.dp)};
  if (c_.zero_stage == 1) {
    layout_.bucket = ModelStatePartition::RecordedBucket(
        trainer_->data_parallel().bucket_elements(), layout.size());
  }
  state_partition_ = std::make_unique<ModelStatePartition>(layout, c_.zero_stage);
  checkpointer_ = std::make_unique<Checkpointer>(c_.checkpoint, layout_, world_.get(),
                                                 state_partition_.get());
  peak_flops_ = c_.flags.peak_flops;
  if (peak_flops_ <= 0 && accelerator_ != nullptr) {
    peak_flops_ = accelerator_->peak_flops();
  } else if (peak_flops_ <= 0) {
    const CpuPeak peak = EstimateCpuPeak();
    peak_flops_ = peak.flops_per_core * threads;
    RM_LOG(INFO) << "MFU against the CPU's peak " << peak.explanation << " x " << threads
                 << " thread(s)";
  }
  const ModelShard& shard = layout.shard();
  RM_LOG(INFO) << "rank " << p.rank << "/" << p.world << " pid " << getpid() << " (tp " << p.tp_rank
               << "/" << p.tp << ", pp " << p.pp_rank << "/" << p.pp << ", dp " << p.dp_rank << "/"
               << p.dp << ", zero " << c_.zero_stage << "): " << c_.model.ToString()
               << "; this shard: layers [" << shard.first_layer << ", "
               << shard.first_layer + shard.num_layers << ")"
               << (shard.has_embedding ? " + embeddings" : "") << (shard.has_head ? " + head" : "")
               << ", " << layout.size() << " parameters, " << trainer_->model().slots()
               << " activation slot(s) (" << trainer_->model().activation_bytes() << " bytes); "
               << source->description() << "; " << c_.micro_steps << " microbatch(es) of "
               << c_.micro_batch << " per step; " << trainer_->data_parallel().buckets().size()
               << " gradient bucket(s); " << threads << " BLAS thread(s) (OpenBLAS "
               << OpenBlasCoreName() << " kernels)";
  return absl::OkStatus();
}

absl::Status Run::CheckLinks(int64_t step) {
  const v1::WatchdogSpec& watchdog = c_.spec.watchdog();
  if (watchdog.link_check_disabled() || c_.place.world == 1) return absl::OkStatus();
  // Mid-run, the ranks check under the init phase's allowance (a slow link can take longer
  // than a step's), and are stepping again after it.
  if (step > 0) RETURN_IF_ERROR(Phase(v1::WORKER_PHASE_INIT));
  const auto start = Clock::now();
  std::vector<LinkCheckGroup> checked;
  for (const GroupMembership& m : GroupsOf(c_.place)) {
    for (Communicator* comm : groups_.all()) {
      if (comm->name() == m.name && std::string(comm->transport()) != "shm") {
        checked.push_back({comm, m.members});
      }
    }
  }
  LinkCheckOptions options;
  options.bytes = watchdog.link_check_bytes();
  options.slow_rank_a = c_.flags.slow_link_a;
  options.slow_rank_b = c_.flags.slow_link_b;
  options.slow_delay_seconds = c_.flags.slow_link_delay;
  options.corrupt_from = c_.flags.corrupt_link_from;
  options.corrupt_to = c_.flags.corrupt_link_to;
  ASSIGN_OR_RETURN(std::vector<LinkResult> links, trainer::CheckLinks(*device_, checked, options));
  const double seconds = Since(start);
  if (links.empty()) {
    RM_LOG(INFO) << "link check: none of this rank's groups crosses a link (one rank, or one "
                    "node's shared memory)";
  }
  v1::ReportLinksRequest report;
  report.set_seconds(seconds);
  report.set_step(step);
  const LinkResult* corrupt = nullptr;
  for (const LinkResult& link : links) {
    RM_LOG(INFO) << absl::StrFormat(
        "link check: %s rank %d <-> rank %d: %.3f GB/s each way (%lld bytes, fastest of %d)%s",
        link.group, c_.place.rank, link.peer_rank, link.bytes / link.seconds / 1e9,
        static_cast<long long>(link.bytes), options.iters,
        link.wrong > 0 ? absl::StrCat(", ", link.wrong, link.wrong == 1 ? " element" : " elements",
                                      " arrived WRONG")
                       : "");
    v1::LinkStat* stat = report.add_links();
    stat->set_group(link.group);
    stat->set_peer_rank(link.peer_rank);
    stat->set_bytes(link.bytes);
    stat->set_seconds(link.seconds);
    stat->set_wrong(link.wrong);
    if (link.wrong > 0 && corrupt == nullptr) corrupt = &link;
  }
  if (agent_ != nullptr && c_.flags.report_metrics) RETURN_IF_ERROR(agent_->ReportLinks(report));
  if (corrupt != nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "link check: ", corrupt->wrong, " of ", corrupt->bytes / 4, " elements from rank ",
        corrupt->peer_rank, " (group ", corrupt->group, ") arrived wrong: the link corrupts data"));
  }
  // Leave the check together: a rank done early would otherwise wait in the next step's
  // collectives, under the step's hang allowance, for a peer still measuring a slow link. The
  // vote with nothing asked is a barrier across the job (tp, then pp, then dp), taken while
  // still in the init phase.
  RETURN_IF_ERROR(AnyRankAsks(groups_, {}).status());
  return step > 0 ? Phase(v1::WORKER_PHASE_STEP) : absl::OkStatus();
}

absl::Status Run::Resume() {
  const auto start = Clock::now();
  absl::Status resumed = Restore();
  restore_seconds_ = Since(start);
  return resumed;
}

absl::Status Run::Restore() {
  std::optional<RankState> loaded;
  if (!c_.checkpoint.dir.empty()) {
    const RankPlace& p = c_.place;
    // Plain DP: the model state is in data-parallel rank 0's file of this (tp, pp) position;
    // ZeRO: in this rank's own file.
    const int source = c_.zero_stage > 0 ? p.rank : p.pp_rank * p.tp + p.tp_rank;
    ASSIGN_OR_RETURN(loaded, checkpointer_->Resume(source));
  }
  if (!loaded.has_value()) {
    RETURN_IF_ERROR(trainer_->InitParameters(c_.data_seed));
    // A fresh start has no learning rate to ramp from: this degree's factor from step 0.
    lr_scale_ = LrScaleRamp{0, c_.lr_scale, c_.lr_scale, 0};
    LogLrScale();
    RM_LOG(INFO) << "no checkpoint to resume from: starting at step 0";
    return absl::OkStatus();
  }
  const RankState& state = *loaded;
  const int64_t step = state.step;
  if (state.data_seed != c_.data_seed) {
    return FieldError("trainer.data.seed",
                      absl::StrCat("is ", c_.data_seed, " but the checkpoint at step ", step,
                                   " was trained with ", state.data_seed));
  }
  AdamWOptimizer& optimizer = trainer_->data_parallel().optimizer();
  if (static_cast<int64_t>(state.master.size()) != optimizer.state_size()) {
    return absl::DataLossError(absl::StrCat("checkpoint at step ", step, " holds ",
                                            state.master.size(), " state elements, want ",
                                            optimizer.state_size()));
  }
  RETURN_IF_ERROR(optimizer.LoadState(state.master.data(), state.m.data(), state.v.data()));
  RETURN_IF_ERROR(trainer_->AfterLoad());
  loader_->set_position(state.data_position);
  start_step_ = state.step;
  lr_scale_ = LrScaleRamp{state.lr_scale_start, state.lr_scale_from, state.lr_scale_to, 0}
                  .Retarget(state.step, c_.lr_scale, c_.lr_scale_warmup);
  LogLrScale();
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
  state.lr_scale_start = lr_scale_.start;
  state.lr_scale_from = lr_scale_.from;
  state.lr_scale_to = lr_scale_.to;
  if (trainer_->holds_model_state()) {
    AdamWOptimizer& optimizer = trainer_->data_parallel().optimizer();
    const int64_t n = optimizer.state_size();
    state.master.resize(n);
    state.m.resize(n);
    state.v.resize(n);
    RETURN_IF_ERROR(optimizer.SaveState(state.master.data(), state.m.data(), state.v.data()));
  }
  // Save waits for the previous checkpoint: its failure, if it failed, goes out first.
  const absl::Status saved = checkpointer_->Save(std::move(state));
  RETURN_IF_ERROR(ReportCheckpointFailures());
  RETURN_IF_ERROR(saved);
  return Phase(v1::WORKER_PHASE_STEP);
}

absl::Status Run::FlushCheckpoint() {
  absl::Status flushed = checkpointer_->Flush();
  // The failures go out first, also those that end the run (max_consecutive_failures).
  RETURN_IF_ERROR(ReportCheckpointFailures());
  RETURN_IF_ERROR(flushed);
  if (std::optional<CommittedCheckpoint> done = checkpointer_->TakeCommitted()) {
    return Phase(v1::WORKER_PHASE_STEP, done);
  }
  return absl::OkStatus();
}

absl::Status Run::ReportCheckpointFailures() {
  for (const CheckpointFailure& f : checkpointer_->TakeFailures()) {
    if (agent_ == nullptr || !c_.flags.report_metrics) continue;  // the log has said it
    v1::ReportCheckpointFailureRequest request;
    request.set_step(f.step);
    request.set_error(f.error.ToString());
    request.set_consecutive_failures(f.consecutive);
    RETURN_IF_ERROR(agent_->ReportCheckpointFailure(std::move(request)));
  }
  return absl::OkStatus();
}

absl::Status Run::StopAfter(int64_t step) {
  stopped_on_request_ = true;
  std::string saved = "no checkpoint directory, so the steps since the start are lost";
  if (!c_.checkpoint.dir.empty()) {
    if (!checkpointer_->Due(step)) RETURN_IF_ERROR(Checkpoint(step));
    RETURN_IF_ERROR(FlushCheckpoint());
    saved = absl::StrCat("checkpoint at step ", step, " committed");
  }
  return absl::AbortedError(
      absl::StrCat("stopped on request (SIGUSR1) after step ", step, "; ", saved));
}

void Run::LogLrScale() const {
  if (lr_scale_.identity()) return;
  const int64_t last = lr_scale_.start + std::max<int64_t>(1, lr_scale_.steps) - 1;
  RM_LOG(INFO) << absl::StrFormat(
      "learning rate x %.9g (DP %d of %d, elastic_batch per_replica: global batch %lld), "
      "ramped from x %.9g over steps %lld-%lld",
      lr_scale_.to, c_.place.dp, c_.desired_dp,
      static_cast<long long>(int64_t{c_.micro_steps} * c_.micro_batch * c_.place.dp),
      lr_scale_.from, static_cast<long long>(lr_scale_.start + 1),
      static_cast<long long>(last + 1));
}

absl::Status Run::Report(int64_t step, const StepStats& stats, double seconds, float lr) {
  const RankPlace& p = c_.place;
  // Tokens of this rank's data-parallel replica; its FLOPs are spread over its tp * pp ranks.
  const int64_t tokens = int64_t{c_.micro_steps} * c_.micro_batch * c_.model.seq_len;
  const double mfu = peak_flops_ > 0 && seconds > 0
                         ? c_.model.FlopsPerToken() * tokens / seconds / (peak_flops_ * p.tp * p.pp)
                         : 0;
  // Exposed communication: all the time the step was blocked in communication (StepStats::
  // comm_seconds: pipeline transfers, the waits inside the passes, the gradient reductions, the
  // norm's sums, the loss and stage times shared over the pipeline, the tied embedding's sync,
  // ZeRO's parameter gathers), whatever the transport; the rest is compute, which the straggler
  // detector compares across ranks.
  const double comm = std::min(stats.comm_seconds, seconds);
  const double bubble =
      seconds > 0 ? std::clamp(stats.pipeline_wait_seconds / seconds, 0.0, 1.0) : 0;
  // grad_norm goes after the fields scripts read by position (bench/trainer_vs_pytorch).
  std::string line = absl::StrFormat(
      "step %lld/%lld loss %.9g tok/s %.0f step_ms %.1f comm_ms %.1f mfu %.3f grad_norm %.4g "
      "lr %.9g",
      static_cast<long long>(step), static_cast<long long>(c_.steps), stats.loss, tokens / seconds,
      seconds * 1e3, comm * 1e3, mfu, stats.grad_norm, lr);
  if (p.pp > 1) {
    // Every stage's compute (gathered over the pipeline), its imbalance (slowest over mean), and
    // this stage's measured idle fraction next to the 1F1B formula.
    std::vector<std::string> ms;
    double slowest = 0, total = 0;
    for (double s : stats.stage_compute_seconds) {
      ms.push_back(absl::StrFormat("%.1f", s * 1e3));
      slowest = std::max(slowest, s);
      total += s;
    }
    const double mean = total / static_cast<double>(stats.stage_compute_seconds.size());
    absl::StrAppendFormat(&line, " stage_ms %s imbalance %.1f%% bubble %.3f (formula %.3f)",
                          absl::StrJoin(ms, ","), mean > 0 ? 100 * (slowest / mean - 1) : 0.0,
                          bubble, BubbleFraction(p.pp, c_.micro_steps));
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (agent_ == nullptr || !c_.flags.report_metrics) return absl::OkStatus();
  if (std::optional<CommittedCheckpoint> done = checkpointer_->TakeCommitted()) {
    RETURN_IF_ERROR(Phase(v1::WORKER_PHASE_STEP, done));
  }
  RETURN_IF_ERROR(ReportCheckpointFailures());
  v1::ReportStepRequest r;
  r.set_step(step);
  r.set_loss(stats.loss);
  r.set_grad_norm(stats.grad_norm);
  r.set_tokens(tokens);
  r.set_step_seconds(seconds);
  r.set_compute_seconds(std::max(0.0, seconds - comm));
  r.set_comm_seconds(comm);
  r.set_stage_compute_seconds(stats.compute_seconds);
  r.set_bubble_fraction(bubble);
  r.set_mfu(mfu);
  r.set_state_bytes(trainer_->state_bytes());
  r.set_end_time_unix_nanos(absl::ToUnixNanos(absl::Now()));
  if (first_report_) {
    first_report_ = false;
    r.set_process_start_unix_nanos(absl::ToUnixNanos(c_.process_start));
    r.set_rendezvous_seconds(rendezvous_seconds_);
    r.set_restore_seconds(restore_seconds_);
    r.set_start_step(start_step_);
  }
  for (Communicator* comm_group : groups_.all()) AddCollectiveStats(*comm_group, &r);
  AddCollectiveStats(*world_, &r);
  return agent_->ReportStep(r);
}

absl::Status Run::Train() {
  RETURN_IF_ERROR(Phase(v1::WORKER_PHASE_STEP));
  InstallStopRequestHandler();
  double loss = 0;
  const MicrobatchFn fill = [this](int micro, int32_t* inputs, int32_t* targets) {
    loader_->Fill(micro, inputs, targets);
  };
  training_since_ = Clock::now();
  for (int64_t step = start_step_; step < c_.steps; ++step) {
    const auto start = Clock::now();
    const float lr = static_cast<float>(c_.schedule.At(step) * lr_scale_.At(step));
    ASSIGN_OR_RETURN(StepStats stats, trainer_->Step(fill, lr, step + 1));
    loss = stats.loss;
    loader_->Advance(c_.micro_steps);
    const double seconds = Since(start);
    RETURN_IF_ERROR(Report(step + 1, stats, seconds, lr));
    if (checkpointer_->Due(step + 1) && !c_.checkpoint.dir.empty()) {
      RETURN_IF_ERROR(Checkpoint(step + 1));
    }
    // One vote per step (a three-float all-reduce per group): the last step needs none. A failed
    // checkpoint writer (a lost peer, a stale generation) stops every rank at once, rather than
    // at the next checkpoint; a stop wins over a link check asked for at the same step.
    if (step + 1 < c_.steps) {
      const bool check = agent_ != nullptr && agent_->TakeLinkCheckRequest();
      ASSIGN_OR_RETURN(const RankRequests asked,
                       AnyRankAsks(groups_, {StopRequested(), check, checkpointer_->failed()}));
      if (asked.writer_failed) {
        RETURN_IF_ERROR(FlushCheckpoint());
        return absl::AbortedError(absl::StrCat("after step ", step + 1,
                                               ": another rank's checkpoint writer failed (its "
                                               "log says why)"));
      }
      if (asked.stop) return StopAfter(step + 1);
      if (asked.check_links) RETURN_IF_ERROR(CheckLinks(step + 1));
    }
    if (step + 1 == c_.flags.exit_after_step &&
        (c_.flags.exit_in_generation == 0 || c_.flags.exit_in_generation == c_.generation)) {
      RETURN_IF_ERROR(checkpointer_->Flush());
      return absl::UnavailableError(absl::StrCat("injected failure after step ", step + 1,
                                                 " (--exit_after_step)"));
    }
  }
  RETURN_IF_ERROR(FlushCheckpoint());
  const Tensor held = trainer_->held_parameters();
  std::vector<float> params(static_cast<size_t>(held.size));
  if (held.dtype == DType::kF32) {
    RETURN_IF_ERROR(device_->CopyToHost(params.data(), held));
  } else {  // bf16 working weights: the CRC is over their fp32 values
    ASSIGN_OR_RETURN(DeviceBuffer f32, device_->Allocate(held.size, DType::kF32));
    device_->Convert(f32.tensor(), held);
    RETURN_IF_ERROR(device_->CopyToHost(params.data(), f32.tensor()));
  }
  std::printf("training done: %lld steps, final loss %.9g, params crc32c %08x, data position "
              "%lld\n",
              static_cast<long long>(c_.steps), loss,
              Crc32c(0, params.data(), params.size() * sizeof(float)),
              static_cast<long long>(loader_->position()));
  std::fflush(stdout);
  return absl::OkStatus();
}

void Run::Abandon() {
  if (trainer_ != nullptr) trainer_->data_parallel().Abandon();
  for (Communicator* group : groups_.all()) group->Abandon();
  if (world_ != nullptr) world_->Abandon();
}

}  // namespace

absl::Status RunTraining(const TrainerConfig& config, AgentClient* agent) {
  Run run(config, agent);
  absl::Status status = run.Setup();
  if (status.ok()) status = run.CheckLinks(/*step=*/0);
  if (status.ok()) status = run.Resume();
  if (status.ok()) status = run.Train();
  // Not after a stop every rank agreed to (StopAfter): their groups end together, normally.
  if (!status.ok() && !run.stopped_on_request()) run.Abandon();
  return status;
}

}  // namespace ringmaster::trainer
