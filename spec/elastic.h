// Elastic data parallelism (JobSpec.min_nodes): the sizes a job may run on when it cannot get
// all its `nodes`. Only the data-parallel degree changes with the node count: tensor and
// pipeline degrees and devices_per_node stay, so a job of N nodes and DP degree D runs on n nodes
// at DP degree D*n/N, which must be a whole number. A job whose program reads the builtin
// trainer's keys keeps its global batch: each replica takes global_batch / (micro_batch * dp)
// micro-batches per step, which must be a whole number. Any other job's program only knows its
// own per-replica batch: the smaller DP degree must divide the full one, so that each replica
// can take full/dp times that batch (RINGMASTER_ACCUMULATION, docs/agent.md).
//
// With elastic_batch per_replica (JobSpec.elastic_batch) a job keeps each replica's batch
// instead: at degree b of its full degree a each replica takes what it takes at full size (the
// builtin trainer's micro-batches global_batch / (micro_batch * a); another program's
// accumulation 1), the global batch shrinks to b/a of it, and the learning rate is scaled by b/a
// (the linear scaling rule, Goyal et al. 2017), ramped linearly over ElasticWarmupSteps after
// each change of degree (trainer/optim/lr_schedule.h's LrScaleRamp; RINGMASTER_LR_SCALE for
// another program). Any whole degree is then reachable.
// Shared by the coordinator (validation, scheduling) and ringctl, below both.
//
// Threading: pure functions; safe from any thread. Ownership: values. Errors: CheckReachable
// returns INVALID_ARGUMENT naming min_nodes; ElasticKeyProblems returns each problem with its
// field; the others none.
#ifndef RINGMASTER_SPEC_ELASTIC_H_
#define RINGMASTER_SPEC_ELASTIC_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "proto/ringmaster/v1/job.pb.h"

namespace ringmaster::spec {

// The fewest nodes the job may run on: min_nodes, or nodes when it is 0 (not elastic).
int MinNodes(const v1::JobSpec& spec);

// The longest elastic_wait_seconds: a day.
inline constexpr double kMaxElasticWaitSeconds = 86400;

// One size a job can run on.
struct ElasticSize {
  int nodes = 0;
  int data = 0;  // its data-parallel degree
  // Micro-batches each replica takes per step (builtin trainer's keys), or how many times its
  // full-size per-replica batch each replica takes (other programs): RINGMASTER_ACCUMULATION.
  int accumulation = 1;
};

// Whether the job keeps each replica's batch (elastic_batch per_replica) rather than the global
// batch (global, or unset) when it runs at a smaller data-parallel degree.
bool KeepsPerReplicaBatch(const v1::JobSpec& spec);

// "global" or "per_replica": the job file's name of the mode (an unknown value: "global").
const char* ElasticBatchName(const v1::JobSpec& spec);

// The learning-rate factor at data-parallel degree `data` of full degree `full_data`: data /
// full_data with elastic_batch per_replica, else 1 (also when a degree is not positive).
double LrScale(const v1::JobSpec& spec, int full_data, int data);

// The steps of the learning-rate ramp after a change of degree: elastic_warmup_steps when set,
// else trainer.optimizer.warmup_steps for a program reading the builtin trainer's keys, else 0.
int64_t ElasticWarmupSteps(const v1::JobSpec& spec);

// The elastic_* keys' rules, each problem as {field, rule}: elastic_batch a defined value,
// elastic_warmup_steps in [0, 10^9], elastic_wait_seconds finite and in [0, 86400]. Empty when
// all hold. Part of coordinator::ValidateJobSpec, which the coordinator's Submit and Plan and the
// trainer apply.
std::vector<std::pair<std::string, std::string>> ElasticKeyProblems(const v1::JobSpec& spec);

// How many times its full-size per-replica batch each replica takes at data-parallel degree
// `data` of a job whose full degree is `full_data` (spec.nodes' size): for a program reading the
// builtin trainer's keys, the micro-batches per step, global_batch / (micro_batch * data); for
// any other, full_data / data. 0 when that is not a whole number (or a degree is not positive).
// With elastic_batch per_replica, the full size's at any degree: global_batch / (micro_batch *
// full_data) for the builtin trainer's keys, 1 for any other program.
int Accumulation(const v1::JobSpec& spec, int full_data, int data);

// The sizes in [MinNodes(spec), spec.nodes] that the job of data-parallel degree `full_data` at
// spec.nodes can run on, largest first; spec.nodes itself is always first. Empty when
// `full_data` is not positive or nodes is not.
std::vector<ElasticSize> ReachableSizes(const v1::JobSpec& spec, int full_data);

// "4 nodes (DP 4, accumulation 1), 2 nodes (DP 2, accumulation 2)".
std::string DescribeSizes(const std::vector<ElasticSize>& sizes);

// Why no size below spec.nodes is reachable for an elastic job (min_nodes below nodes) whose
// full data-parallel degree is `full_data`, as a rule for the field min_nodes; "" when one is, or
// the job is not elastic.
std::string UnreachableRule(const v1::JobSpec& spec, int full_data);

// For an elastic job (min_nodes below nodes) whose full data-parallel degree is `full_data`: OK
// when some size below spec.nodes is reachable, else INVALID_ARGUMENT naming min_nodes and why.
// OK for a job that is not elastic.
absl::Status CheckReachable(const v1::JobSpec& spec, int full_data);

}  // namespace ringmaster::spec

#endif  // RINGMASTER_SPEC_ELASTIC_H_
