// The job file: YAML with the keys of DESIGN.md's job spec (the user contract), to and from
// v1::JobSpec.
//
// Keys (all optional unless the coordinator's validation says otherwise):
//   name, nodes, devices_per_node,
//   parallelism: {tensor, pipeline, data},
//   trainer: {builtin | command: [argv...], model: {layers, d_model, heads, seq_len, vocab},
//             batch: {micro_batch, global_batch}, steps,
//             optimizer: {lr, warmup_steps, weight_decay, clip_grad_norm, min_lr, beta1, beta2,
//                         epsilon},
//             precision: fp32 | bf16, zero_stage, data: {path, seed}, env: {NAME: value}},
//   checkpoint: {dir, every_steps, keep},
//   restart: {max_restarts, window_minutes},
//   watchdog: {hang_timeout: auto | <seconds>, straggler_threshold}
#ifndef RINGMASTER_CTL_JOB_YAML_H_
#define RINGMASTER_CTL_JOB_YAML_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/ringmaster/v1/job.pb.h"

namespace ringmaster::ctl {

// Parses a job file. INVALID_ARGUMENT naming the file, line, column and field for: YAML syntax
// errors, unknown keys (with the closest known key as a suggestion), wrong types ("expected an
// integer, got \"four\""), out-of-range integers, and a mapping where a scalar is expected (or
// the reverse). Example: "job.yaml:7:5: trainer.batch.micro_batch: expected an integer, got
// \"four\"". Range and consistency rules are the coordinator's (ValidateJobSpec), not this
// parser's.
absl::StatusOr<v1::JobSpec> ParseJobYaml(const std::string& text, const std::string& filename);

// Writes `spec` as a job file that ParseJobYaml reads back to an equal spec. Unset (zero) fields
// are left out.
std::string JobSpecToYaml(const v1::JobSpec& spec);

}  // namespace ringmaster::ctl

#endif  // RINGMASTER_CTL_JOB_YAML_H_
