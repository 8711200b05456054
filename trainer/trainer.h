// The training loop of the builtin GPT trainer: joins the communication groups through the
// rendezvous (world, then tp, pp, dp and the pipeline's tied-embedding group), builds this rank's
// ParallelTrainer (model shard, data parallelism, 1F1B pipeline; parallel/parallel_trainer.h),
// data and checkpoints from a TrainerConfig, resumes from the newest complete checkpoint, trains
// to the configured step count, and reports every step to the agent.
//
// Per optimizer step: ParallelTrainer::Step (the stage's forward and backward passes over the
// step's microbatches, transfers between stages, gradient reductions, whole-model norm, clipping,
// AdamW, ZeRO gathers); report; maybe checkpoint.
//
// Output: one line per step on stdout ("step 12/200 loss 3.21404505 ...", with stage timings and
// the bubble under pipeline parallelism), the same loss on every rank, and at the end a line with
// the final loss and the CRC-32C of this rank's parameters, so runs can be compared exactly.
#ifndef RINGMASTER_TRAINER_TRAINER_H_
#define RINGMASTER_TRAINER_TRAINER_H_

#include <memory>

#include "absl/status/status.h"
#include "trainer/trainer_config.h"
#include "trainer/worker/agent_client.h"

namespace ringmaster::trainer {

// Trains as `config` says. `agent` (may be null: standalone) receives phases, step reports and
// serves as the rendezvous store. Errors: configuration problems are INVALID_ARGUMENT /
// FAILED_PRECONDITION / UNIMPLEMENTED (fatal); lost peers, timeouts and I/O failures are
// UNAVAILABLE / DEADLINE_EXCEEDED (retryable).
absl::Status RunTraining(const TrainerConfig& config, AgentClient* agent);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_TRAINER_H_
