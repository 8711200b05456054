// What launching a job's generation sends: one LaunchWorkers per node of its placement. Pure
// functions of the job's status (no clock, no nodes, no I/O).
//
// Threading: none (pure). Ownership: results are values. Errors: none; the caller places the job
// first (placement.h), so the status's assignments are assumed well formed (ranks 0..world-1).
#ifndef RINGMASTER_COORDINATOR_LAUNCH_PLAN_H_
#define RINGMASTER_COORDINATOR_LAUNCH_PLAN_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "coordinator/placement.h"
#include "proto/ringmaster/v1/agent.pb.h"
#include "proto/ringmaster/v1/coordinator.pb.h"

namespace ringmaster::coordinator {

// The layout the job asks for: spec.nodes, and its spec's degrees, or its plan's where the spec
// left them to the planner (spec.parallelism.tensor 0).
Layout DesiredLayoutOf(const v1::JobStatus& status);

// `desired` on `nodes` nodes (an elastic job's smaller size, spec/elastic.h): the data-parallel
// degree in proportion (the caller picks a size where that is a whole number), the rest as is.
Layout LayoutAtNodes(const Layout& desired, int nodes);

// The current generation's layout: the desired one, or for an elastic job running on fewer
// nodes (status.elastic_nodes) that size's.
Layout LayoutOf(const v1::JobStatus& status);

// MASTER_PORT of a job's generation: one port per (job, generation) from
// [port_base, port_base + 1000), so that every agent agrees on it without another round trip.
int MasterPort(int port_base, const std::string& job_id, int64_t generation);
// The same, avoiding `taken` (other live jobs' ports): the first port of the range, from that
// one upwards and wrapping, that is not in `taken`; MasterPort's when every port is taken.
int MasterPort(int port_base, const std::string& job_id, int64_t generation,
               const std::set<int>& taken);

struct LaunchPlan {
  int world_size = 0;
  // By node: a CoordinatorMessage holding that node's LaunchWorkers (its ranks, in rank order).
  std::map<std::string, v1::CoordinatorMessage> messages;

  // "placed W ranks on N nodes (generation G)", the RUNNING transition's message.
  std::string Summary(int64_t generation) const;
};

// The launch of `status`'s current generation: `status` holds the new generation and its
// placement's assignments; every node's message carries the job's spec, layout, world size,
// restart count and rank 0's `master_addr` and `master_port`.
LaunchPlan PlanLaunch(const v1::JobStatus& status, const std::string& master_addr, int master_port);

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_LAUNCH_PLAN_H_
