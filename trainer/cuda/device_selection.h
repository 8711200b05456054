// Which compute device a trainer process uses, from its environment: the agent sets
// CUDA_VISIBLE_DEVICES to the GPU it assigned a rank (agent/node_agent.cc) and leaves it unset
// on CPU slots. The CUDA runtime then numbers that GPU 0 inside the process.
#ifndef RINGMASTER_TRAINER_CUDA_DEVICE_SELECTION_H_
#define RINGMASTER_TRAINER_CUDA_DEVICE_SELECTION_H_

#include <functional>
#include <optional>
#include <string>

namespace ringmaster::trainer {

// The CUDA device index to use (0: the first visible GPU), or nullopt for the CPU: when
// CUDA_VISIBLE_DEVICES is unset, empty, or names no device ("-1", "none", "NoDevFiles", as
// CUDA treats an invalid first entry as hiding every device).
std::optional<int> CudaDeviceFromEnvironment(
    const std::function<std::optional<std::string>(const char* name)>& env);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CUDA_DEVICE_SELECTION_H_
