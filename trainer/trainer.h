// The training loop of the builtin GPT trainer: builds the communicators from the rendezvous,
// the model, data, data parallelism and checkpoints from a TrainerConfig, resumes from the newest
// complete checkpoint, trains to the configured step count, and reports every step to the agent.
//
// Per optimizer step (M microbatches per rank):
//   for each microbatch: load it, forward (loss gradient fused), backward; during the last
//   microbatch's backward, gradient buckets are reduced as they become final;
//   wait for the reduction; loss and gradient norm over the data-parallel group; clip; AdamW
//   (ZeRO: on the owned chunks, then parameters gathered); report; maybe checkpoint.
//
// Output: one line per step on stdout ("step 12/200 loss 3.21404505 ..."), and at the end a line
// with the final loss and the CRC-32C of this rank's parameters, so runs can be compared exactly.
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
