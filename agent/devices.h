// The devices an agent offers: CPU slots from --devices=cpu:N, or the GPUs the CUDA runtime sees.
#ifndef RINGMASTER_AGENT_DEVICES_H_
#define RINGMASTER_AGENT_DEVICES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/ringmaster/v1/agent.pb.h"

namespace ringmaster::agent {

// Parses the --devices flag:
//  - "cpu:N"  -> N CPU slots (1 <= N <= 1024), index 0..N-1, kind "cpu", model "cpu-slot",
//                all in interconnect domain 0;
//  - "gpu"    -> every GPU the CUDA runtime reports (see DiscoverGpus);
//  - "auto"   -> "gpu" when at least one GPU is visible, else "cpu:1".
// INVALID_ARGUMENT "--devices: ..." for anything else; FAILED_PRECONDITION for "gpu" when no GPU
// is visible (or the agent was built without CUDA).
absl::StatusOr<std::vector<v1::Device>> ParseDevices(const std::string& flag);

// GPUs visible to the CUDA runtime: index = CUDA ordinal, kind "gpu", model = device name,
// memory_bytes = total global memory, compute_capability "major.minor". Topology: GPUs that can
// access each other's memory (cudaDeviceCanAccessPeer both ways) share an interconnect domain;
// domains are numbered from 0 in order of their lowest ordinal. Empty when the agent was built
// without CUDA or no GPU is visible.
std::vector<v1::Device> DiscoverGpus();

// The CUDA_VISIBLE_DEVICES entry that gives a worker the agent's GPU `ordinal`. The agent's own
// ordinals count the GPUs its CUDA_VISIBLE_DEVICES (`agent_visible`, null when unset) lets it
// see, in that list's order: ordinal i is the list's i-th entry (an index, a GPU-/MIG- UUID, as
// given). Without the variable, or when the list has no i-th entry, the ordinal itself.
std::string WorkerVisibleDevice(int ordinal, const char* agent_visible);

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_DEVICES_H_
