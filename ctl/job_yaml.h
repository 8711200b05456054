// The job file: YAML with the keys of the job spec (the user contract), to and from v1::JobSpec.
// Threading: pure functions of their arguments, safe from any thread. Ownership: values in,
// values out. Errors: ParseJobYaml returns INVALID_ARGUMENT (below); JobSpecToYaml cannot fail.
//
// Which keys exist, what each sets and how it is read and written is one table
// (ctl/job_file_keys.h). All keys are optional unless the coordinator's validation says
// otherwise. The keys, as JobFileKeyOutline() prints them (job_file_keys_test checks this list):
//  name (string): 1-63 characters of [a-z0-9-], starting with a letter
//  nodes (integer): nodes to run on
//  min_nodes (integer): fewest nodes to run on, data-parallel degree shrunk; omitted: nodes
//  devices_per_node (integer): devices (GPUs, or CPU slots) used on each node
//  spares (integer): idle nodes held to replace a lost one at once; omitted: 0
//  elastic_batch (global | per_replica): kept below nodes; per_replica scales lr; omitted: global
//  elastic_warmup_steps (integer): lr ramp steps after a DP change; omitted: warmup_steps
//  elastic_wait (number): seconds to wait for a lost node's replacement; 0: shrink
//  parallelism (mapping): the parallel layout; omitted: the planner's
//    tensor (integer): tensor-parallel degree
//    pipeline (integer): pipeline stages
//    data (integer): data-parallel replicas
//  trainer (mapping): what each rank runs
//    builtin (string): a built-in trainer (gpt)
//    command ([argv...]): argv of a program run once per rank (no shell); or builtin
//    model (mapping): model dimensions (builtin)
//      layers (integer): transformer blocks
//      d_model (integer): embedding width
//      heads (integer): attention heads
//      seq_len (integer): tokens per sequence
//      vocab (integer): vocabulary size
//    batch (mapping): batch sizes (builtin)
//      micro_batch (integer): sequences per micro-batch
//      global_batch (integer): sequences per optimizer step
//    steps (integer): optimizer steps to run; optional for a command
//    optimizer (mapping): AdamW settings (builtin); each has a default
//      lr (number): peak learning rate; omitted: 3e-4
//      warmup_steps (integer): linear warm-up steps; omitted: 5% of steps, at most 1000
//      weight_decay (number): decoupled weight decay; omitted: 0.1
//      clip_grad_norm (number): gradient norm clip; omitted: 1.0; 0: none
//      min_lr (number): learning rate at the end of the decay; omitted: lr/10
//      beta1 (number): Adam beta1; omitted: 0.9
//      beta2 (number): Adam beta2; omitted: 0.95
//      epsilon (number): Adam epsilon; omitted: 1e-8
//    precision (fp32 | bf16): (builtin) omitted: fp32 on CPU, bf16 on GPU
//    attention (fused | materialized): attention kernels (builtin)
//    zero_stage (integer): ZeRO stage, 0-3 (builtin)
//    data (mapping): training data (builtin)
//      path (string): token file; omitted: a built-in corpus
//      seed (integer >= 0): data order seed
//    env ({NAME: value}): extra environment of every rank
//  checkpoint (mapping): checkpoint policy
//    dir (string): absolute directory shared by every node
//    every_steps (integer): steps between checkpoints; 0: none
//    keep (integer): complete checkpoints kept
//    max_consecutive_failures (integer): failed saves in a row that fail the job; 0: never
//  restart (mapping): restart policy
//    max_restarts (integer): restarts before FAILED; omitted: 3
//    window_minutes (integer): count only this window's restarts; 0: all
//  watchdog (mapping): hang, straggler and link detection
//    hang_timeout (auto | seconds): seconds without progress; auto: from step times
//    init_timeout (auto | seconds): seconds to the first step; auto: the agent's (10 min)
//    checkpoint_timeout (auto | seconds): seconds one save may take; auto: the agent's (30 min)
//    straggler_threshold (number): slowdown factor over peers that flags a straggler
//    link_check (true | false): check each link as a generation starts
//    link_check_bytes (integer): bytes per link-check exchange
//    slow_link_ratio (number): slow below this fraction of its kind's median
//    min_link_bytes_per_second (number): slow below this bandwidth
//    auto_link_check (true | false): check the links when the step time rises unexplained
//    auto_link_check_interval (number): least seconds between automatic checks
//    python_watch (true | false): watch a Python command's PyTorch steps (docs/python.md)
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
// \"four\""; and, as the coordinator would, a key only the builtin trainer reads set in a
// command job of another program (spec/trainer_keys.h): "job.yaml:6:3: trainer.model: only the
// builtin trainer reads it; ...". Other range and consistency rules are the coordinator's
// (ValidateJobSpec), not this parser's.
absl::StatusOr<v1::JobSpec> ParseJobYaml(const std::string& text, const std::string& filename);

// Writes `spec` as a job file that ParseJobYaml reads back to an equal spec (any spec it read, and
// any other without a key ParseJobYaml refuses for a command job). Unset (zero) fields are left
// out.
std::string JobSpecToYaml(const v1::JobSpec& spec);

}  // namespace ringmaster::ctl

#endif  // RINGMASTER_CTL_JOB_YAML_H_
