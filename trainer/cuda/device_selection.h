// Which compute device a trainer process uses, from its environment: the agent sets
// CUDA_VISIBLE_DEVICES to the GPU it assigned a rank (agent/node_agent.cc) and leaves it unset
// on CPU slots. The CUDA runtime then numbers that GPU 0 inside the process. Launched by hand
// with several GPUs visible (torchrun's way), local rank i uses visible device i.
#ifndef RINGMASTER_TRAINER_CUDA_DEVICE_SELECTION_H_
#define RINGMASTER_TRAINER_CUDA_DEVICE_SELECTION_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace ringmaster::trainer {

// The CUDA device index to use, or nullopt for the CPU: when CUDA_VISIBLE_DEVICES is unset,
// empty, or names no device ("-1", "none", "NoDevFiles", as CUDA treats an invalid first entry
// as hiding every device). One visible device: 0. Several: LOCAL_RANK (0 when unset), and
// INVALID_ARGUMENT naming the variable when it is not a number or there are too few devices for
// it (ranks sharing a GPU would fail in NCCL's setup, again at every restart).
absl::StatusOr<std::optional<int>> CudaDeviceFromEnvironment(
    const std::function<std::optional<std::string>(const char* name)>& env);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CUDA_DEVICE_SELECTION_H_
