// Everything a trainer process needs to know, gathered from where it comes from: the job spec
// (RINGMASTER_JOB_SPEC_JSON from the agent, or --spec=job.yaml when run by hand), the rank's
// place in the job (RANK, WORLD_SIZE, RINGMASTER_{TP,PP,DP}_{RANK,SIZE}), and the trainer's own
// flags. Standalone (no RINGMASTER_AGENT_SOCKET) the trainer is one rank that runs the whole
// global batch by gradient accumulation.
#ifndef RINGMASTER_TRAINER_TRAINER_CONFIG_H_
#define RINGMASTER_TRAINER_TRAINER_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/ringmaster/v1/job.pb.h"
#include "trainer/checkpoint/checkpointer.h"
#include "trainer/model/gpt_config.h"
#include "trainer/optim/adamw_optimizer.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/parallel/parallel_groups.h"
#include "trainer/worker/agent_client.h"

namespace ringmaster::trainer {

// Options of the trainer binary itself (flags), not of the job.
struct TrainerFlags {
  std::string spec_file;           // --spec: a job file, when not under an agent
  int blas_threads = 0;            // 0: cores / ranks on this node
  int64_t bucket_bytes = 4 << 20;  // gradient bucket size
  absl::Duration comm_timeout = absl::Minutes(10);
  double peak_flops = 0;           // per rank, for MFU; 0: estimated from the CPU
  double slow_factor = 1;          // test flag: this rank's compute is stretched by this factor
  int slow_rank = -1;              // ... on this rank only (-1: none)
  double slow_after_seconds = 0;   // ... once its process has trained this long
  int slow_link_a = -1;            // test flag: the link check's exchanges between these two
  int slow_link_b = -1;            // global ranks (-1: none) each take this much longer
  double slow_link_delay = 0;      // (seconds)
  int corrupt_link_from = -1;      // test flag: in the link check, this global rank's data
  int corrupt_link_to = -1;        // arrives at this one with an element changed (-1: none)
  bool report_metrics = true;      // step reports to the agent (off: only for the overhead bench)
  int64_t exit_after_step = 0;     // fault injection: fail (retryable) after this step; 0: never
  bool shared_memory = true;       // groups on one machine communicate through shared memory
  int64_t exit_in_generation = 0;  // ... only in this job generation; 0: in every generation
  // Fault injection: in this step (0: never) the loss gradient of this global rank (-1: of every
  // rank on the last pipeline stage) is NaN.
  int64_t nan_gradients_at_step = 0;
  int nan_gradients_rank = -1;
};

struct TrainerConfig {
  v1::JobSpec spec;  // defaults applied and validated
  RankPlace place;
  GptConfig model;
  int micro_batch = 0;   // sequences per rank per microbatch
  int micro_steps = 0;   // microbatches per optimizer step per data-parallel rank (m)
  // Elastic data parallelism (spec/elastic.h): the degree at spec.nodes
  // (RINGMASTER_DESIRED_DP_SIZE; this run's own standalone), and with elastic_batch per_replica
  // the learning-rate factor at this degree (dp / desired_dp) and the steps of its ramp after a
  // change of degree (spec::ElasticWarmupSteps); 1 and 0 otherwise. The step's global batch is
  // micro_steps * micro_batch * dp: global_batch, or per replica dp / desired_dp of it.
  int desired_dp = 1;
  double lr_scale = 1;
  int64_t lr_scale_warmup = 0;
  int64_t steps = 0;
  LrSchedule schedule;
  AdamWConfig adamw;
  double clip_grad_norm = 0;
  int zero_stage = 0;
  std::string data_path;  // empty: the built-in corpus
  uint64_t data_seed = 0;
  CheckpointOptions checkpoint;
  std::string host_address;  // where peers reach this rank (RINGMASTER_HOST_ADDRESS)
  // The node the coordinator placed this rank on (RINGMASTER_NODE; empty standalone): only
  // ranks of one node share memory (ConnectGroup).
  std::string node;
  int local_world = 1;       // ranks on this node (LOCAL_WORLD_SIZE)
  absl::Time process_start;  // when main() started (for the startup figures of the first report)
  int64_t generation = 0;    // the job generation (RINGMASTER_GENERATION; 0 standalone)
  TrainerFlags flags;
};

// Builds and checks the configuration. Every problem is INVALID_ARGUMENT naming the field or
// variable (e.g. "parallelism.tensor: must divide model.heads (4), got 3"): a fatal
// configuration error that a restart cannot fix. Any tensor x pipeline x data layout the model
// can be split into is accepted (tensor divides model.heads; pipeline at most model.layers), with
// ZeRO stages 0-3 on the data-parallel dimension.
absl::StatusOr<TrainerConfig> LoadTrainerConfig(const EnvLookup& env, const TrainerFlags& flags);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_TRAINER_CONFIG_H_
