// Validation of user job specs and the defaults applied to them.
//
// Every problem is reported, not just the first: the error is INVALID_ARGUMENT with one line per
// problem, each "field: rule" with the field in YAML/proto path form and the offending value,
// e.g. "parallelism.tensor: must divide devices_per_node (8), got 3".
#ifndef RINGMASTER_COORDINATOR_SPEC_VALIDATION_H_
#define RINGMASTER_COORDINATOR_SPEC_VALIDATION_H_

#include "absl/status/status.h"
#include "proto/ringmaster/v1/job.pb.h"

namespace ringmaster::coordinator {

// Fills unset fields with their documented defaults (job.proto). For a job whose program reads
// the builtin trainer's keys (spec/trainer_keys.h ReadsBuiltinKeys: builtin, or a command running
// the trainer's program) the optimizer's: lr 3e-4 (when 0), warmup_steps 5% of trainer.steps at
// most 1000, weight_decay 0.1, clip_grad_norm 1.0, min_lr = lr/10, beta1 0.9, beta2 0.95 (these
// six have presence: a 0 that is set stays 0), epsilon 1e-8; and data.seed 1234 (presence too).
// A command job gets none of them: it may not set those keys. For every job: checkpoint.keep 3;
// restart.max_restarts 3 (presence); watchdog.straggler_threshold 1.2, link_check_bytes 4 MiB,
// slow_link_ratio 0.5. trainer.steps stays as given. Idempotent.
void ApplyDefaults(v1::JobSpec* spec);

// A job stored before trainer.optimizer's warmup_steps, weight_decay and clip_grad_norm had
// presence and defaults (5% of steps, 0.1, 1.0): its 0s were absent on the wire, and meant 0.
// Since ApplyDefaults sets all three for every job that runs the builtin trainer's program, such
// a stored job lacking one predates them: it is set to 0 explicitly, so that neither this
// coordinator nor the trainer (which applies the defaults again) changes how the job trains.
// Run on each stored job when the coordinator loads it. True if it changed `spec`.
bool KeepPreDefaultsOptimizerZeros(v1::JobSpec* spec);

// Checks `spec` (after ApplyDefaults). When parallelism is all zero the planner chooses it, and
// the layout rules below are skipped. Rules:
//  - name: 1-63 chars of [a-z0-9-], starting with a letter;
//  - nodes in [1, 100000]; devices_per_node in [1, 1024];
//  - min_nodes 0 (= nodes) or in [1, nodes]; below nodes with a layout given, some size in
//    [min_nodes, nodes) must be reachable by shrinking only the data-parallel degree
//    (spec/elastic.h: a whole degree dividing global_batch with micro_batch, or the full degree
//    for another program's job);
//  - parallelism: all three zero, or all three >= 1 with tensor*pipeline*data ==
//    nodes*devices_per_node; tensor divides devices_per_node;
//  - trainer: exactly one of builtin ("gpt") and command (non-empty argv, no empty argv[0]);
//  - a command job whose program is not the builtin trainer's (spec/trainer_keys.h) sets none of
//    model, batch, optimizer, precision, attention, zero_stage and data ("trainer.model: only
//    the builtin trainer reads it; ..."), and its steps may be 0 (unset): in [0, 10^9]; the
//    rules below on steps, the optimizer, precision, attention and zero_stage are the builtin
//    trainer's and apply to the other jobs;
//  - what the agent passes to exec: at most 256 trainer.env variables, named
//    [A-Za-z_][A-Za-z0-9_]* and none of those the agent sets (RANK, WORLD_SIZE, LOCAL_RANK,
//    LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,
//    TORCHELASTIC_MAX_RESTARTS, ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE, GROUP_WORLD_SIZE,
//    CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, RINGMASTER_*); no NUL byte in env values, argv,
//    checkpoint.dir or data.path; the whole spec at most 64 KiB as JSON (what the agent passes);
//  - builtin "gpt" needs model (layers, d_model, heads, seq_len, vocab all >= 1; layers <= 1024,
//    d_model <= 65536, heads <= 1024, seq_len <= 1048576, vocab <= 10000000, and >= 128 without
//    data.path (the built-in corpus's ASCII bytes); d_model divisible by heads; layers >= pipeline;
//    heads divisible by tensor) and batch (micro_batch >= 1, micro_batch*seq_len <= 2^31-1,
//    global_batch >= 1 and divisible by micro_batch * data, by micro_batch alone when the planner
//    chooses);
//  - steps in [1, 10^9]; optimizer lr in (0, 10], min_lr in
//    [0, lr], warmup_steps >= 0, weight_decay >= 0, clip_grad_norm >= 0, betas in [0, 1),
//    epsilon > 0;
//  - zero_stage in [0, 3];
//  - checkpoint: every_steps >= 0, keep >= 1, dir required when every_steps > 0, no ".."
//    component in dir, nor dir in /proc, /sys or /dev (or below them);
//    max_consecutive_failures in [0, 1000000];
//  - restart.max_restarts in [0, 1000], restart.window_minutes in [0, 525600] (a year);
//  - watchdog: hang_timeout_seconds, init_timeout_seconds and checkpoint_timeout_seconds >= 0
//    (0: auto), straggler_threshold > 1, link_check_bytes in
//    [1, 2^30], slow_link_ratio in (0, 1), min_link_bytes_per_second >= 0;
//  - precision: any enum value defined in job.proto;
//  - attention: any enum value defined in job.proto; for the builtin trainer, fused not with
//    precision fp32, and only with heads of 32 or 64 channels (d_model / heads).
// NaN or infinite doubles are refused for every field. A long value is quoted back cut to its
// first 64 bytes.
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// What a spec submitted to the coordinator must also meet: checkpoint.dir and trainer.data.path,
// where given, are absolute (the ranks start in their agents' working directories, which differ
// from node to node). INVALID_ARGUMENT naming the field. Not checked by ValidateJobSpec: a trainer
// run by hand resolves them in its own directory, and jobs accepted before the rule keep running.
absl::Status ValidateClusterPaths(const v1::JobSpec& spec);

// Whether the builtin trainer's fused attention kernels take this model's heads: 32 or 64
// channels (d_model / heads, d_model divisible by heads). The rule ValidateJobSpec applies to
// `attention: fused`, and that the planner applies to an unset attention.
bool FusedAttentionTakesHeads(const v1::ModelSpec& model);

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_SPEC_VALIDATION_H_
