// The planner: chooses TP/PP/DP when a job spec leaves them out, and explains any layout with the
// numbers behind it. Pure functions; the coordinator stores the explanation with the job and
// `ringctl plan` prints it.
//
// Decision rules (docs/coordinator.md, "Planning"), applied in this order:
//  1. TP divides devices_per_node and the number of heads (TP <= devices per node: TP stays
//     inside a node's fast interconnect).
//  2. PP divides the layers and, when PP > 1, leaves at least 4 layers per stage.
//  3. DP = world / (TP*PP) must divide global_batch / micro_batch; the microbatches per step
//     m = global_batch / (micro_batch * DP) must be >= 4 * (PP - 1) so the bubble stays small.
//  4. Among layouts that satisfy 1-3 and whose memory estimate (state + activations in flight,
//     below) fits the device memory, take the one with the smallest TP*PP (the most data
//     parallelism); on a tie prefer larger TP (it runs over the in-node interconnect) over PP
//     (which adds a bubble).
//  5. If none fits in memory, take the layout with the smallest memory per device and say so.
//
// Estimates (documented in docs/coordinator.md, "Planning"):
//  - parameters P = V*d + T*d + L*(12 d^2 + 13 d) + 2 d (GPT-2 with tied embeddings, V padded to a
//    multiple of 128);
//  - state bytes per device = 16 bytes/param (bf16 weights and grads, fp32 master weights and two
//    Adam moments; 16 bytes for fp32 too: 4+4+8) * P / (TP*PP), with ZeRO dividing the optimizer
//    state (12 bytes; fp32: 8) by DP at stage >= 1, the gradients (2; fp32: 4) at stage >= 2 and
//    the weights (2; fp32: 4) at stage 3;
//  - activation bytes per microbatch on the first stage: (L/PP) * s*b*d * (34 + 5*a*s/d) / TP
//    (Megatron-LM's estimate, bf16; without the 5*a*s/d of attention's scores and probabilities
//    for `attention: fused`), times min(m, PP) microbatches in flight under 1F1B;
//  - bubble fraction (p-1)/(m+p-1);
//  - bytes sent per rank per step: TP 4 all-reduces per layer per microbatch of s*b*d elements
//    (ring: 2(t-1)/t of the buffer); PP one activation forward and one gradient backward of
//    s*b*d elements per microbatch; DP a ring all-reduce of the rank's gradients,
//    2(d-1)/d * P/(TP*PP) elements, 3(d-1)/d with ZeRO-3 (weights gathered again for the backward
//    pass) (bytes per element: 2 for bf16, 4 for fp32; an unspecified precision counts as bf16).
#ifndef RINGMASTER_COORDINATOR_PLANNER_H_
#define RINGMASTER_COORDINATOR_PLANNER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/ringmaster/v1/job.pb.h"

namespace ringmaster::coordinator {

struct PlannerOptions {
  // Memory of one device in bytes; 0 means unknown (every layout "fits", reasons say so).
  int64_t device_memory_bytes = 0;
  // Where that figure comes from, quoted in the reasons after it (e.g. "the smallest GPU of the
  // registered nodes"); empty: nothing is said.
  std::string device_memory_source;
};

// Parameter count of the spec's model (see the formula above).
int64_t CountParameters(const v1::ModelSpec& model);

// Plans `spec` (which must have passed ValidateJobSpec, except that parallelism may be all zero).
// If spec.parallelism is set, explains that layout; otherwise chooses one by the rules above.
// INVALID_ARGUMENT ("parallelism: no layout satisfies ...", with the reason for the closest
// candidate) when no layout satisfies rules 1-3. For command (non-builtin) trainers, which have
// no model, the layout defaults to pure DP and the model estimates are zero.
absl::StatusOr<v1::PlanExplanation> Plan(const v1::JobSpec& spec, const PlannerOptions& options);

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_PLANNER_H_
