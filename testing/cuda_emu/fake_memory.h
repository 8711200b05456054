// What the emulated CUDA runtime (fake_cuda_runtime.cc) knows of its allocations, for the other
// fakes (fake_nccl.cc checks its buffers against it).
#ifndef RINGMASTER_TESTING_CUDA_EMU_FAKE_MEMORY_H_
#define RINGMASTER_TESTING_CUDA_EMU_FAKE_MEMORY_H_

#include <cstddef>

namespace emu {

// Whether the `bytes` from `p` lie within one live cudaMalloc/cudaMallocAsync allocation made on
// `device`. Thread-safe.
bool IsDeviceRange(const void* p, size_t bytes, int device);

}  // namespace emu

#endif  // RINGMASTER_TESTING_CUDA_EMU_FAKE_MEMORY_H_
