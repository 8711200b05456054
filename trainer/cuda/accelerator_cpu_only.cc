// OpenAccelerator in builds without CUDA (--config=cpu, or no toolkit): always the CPU.
#include "trainer/cuda/accelerator.h"

namespace ringmaster::trainer {

void PrepareAcceleratorEnvironment() {}

absl::StatusOr<std::unique_ptr<Accelerator>> OpenAccelerator(
    const std::function<std::optional<std::string>(const char* name)>&, DType, bool) {
  return nullptr;
}

}  // namespace ringmaster::trainer
