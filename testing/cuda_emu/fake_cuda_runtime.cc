// The CUDA runtime calls of the trainer's CUDA code, answered on the CPU for the emulated
// configuration (--config=emu, cuda_emu.h): devices whose memory is host memory, the streams and
// events of fake_streams.h, and the launch errors of the emulator. Linked into a test binary,
// these definitions take precedence over libcudart's for every call the binary makes. Only the
// calls the trainer makes; the error strings still come from libcudart.
//
// Allocations are remembered, so that cudaPointerGetAttributes tells device memory (cudaMalloc)
// from pinned host memory (cudaMallocHost) and from any other host memory, and cudaFree refuses
// a pointer it did not allocate (cudaErrorInvalidValue).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "testing/cuda_emu/cuda_emu.h"
#include "testing/cuda_emu/fake_memory.h"
#include "testing/cuda_emu/fake_streams.h"

namespace {

// GPU allocations are 256-byte aligned; cuBLASLt plans depend on pointer alignment.
constexpr size_t kAlignment = 256;
constexpr size_t kMemoryBytes = size_t{80} << 30;

// A failed call is also the thread's last error, as in CUDA.
cudaError_t Failed(cudaError_t error, const std::string& what) {
  emu::RecordError(error, what);
  return error;
}

struct Allocation {
  uintptr_t base;
  size_t bytes;
  cudaMemoryType type;  // cudaMemoryTypeDevice or cudaMemoryTypeHost (pinned)
  int device;
};

// Every live allocation, by address.
class Allocations {
 public:
  void Add(void* p, size_t bytes, cudaMemoryType type, int device) {
    std::lock_guard<std::mutex> lock(mu_);
    const uintptr_t base = reinterpret_cast<uintptr_t>(p);
    by_address_[base] = Allocation{base, bytes, type, device};
  }
  bool Remove(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    return by_address_.erase(reinterpret_cast<uintptr_t>(p)) != 0;
  }
  // The allocation `p` points into, if any.
  std::optional<Allocation> Find(const void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    const uintptr_t address = reinterpret_cast<uintptr_t>(p);
    auto it = by_address_.upper_bound(address);
    if (it == by_address_.begin()) return std::nullopt;
    --it;
    if (address >= it->first + std::max<size_t>(it->second.bytes, 1)) return std::nullopt;
    return it->second;
  }

 private:
  std::mutex mu_;
  std::map<uintptr_t, Allocation> by_address_;
};

Allocations& TheAllocations() {
  static auto* allocations = new Allocations;  // used until exit
  return *allocations;
}

// Filled with 0xff bytes (NaN as fp32 and bf16), since device memory is not zeroed: a kernel
// reading what nobody wrote shows.
cudaError_t Allocate(void** p, size_t bytes, cudaMemoryType type) {
  if (p == nullptr) return Failed(cudaErrorInvalidValue, "allocation without a pointer");
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  *p = std::aligned_alloc(kAlignment, rounded);
  if (*p == nullptr) return Failed(cudaErrorMemoryAllocation, "out of host memory");
  std::memset(*p, 0xff, rounded);
  TheAllocations().Add(*p, bytes, type, emu::CurrentDevice());
  return cudaSuccess;
}

cudaError_t Free(void* p, const char* what) {
  if (!TheAllocations().Remove(p)) {
    return Failed(cudaErrorInvalidValue, std::string(what) + " of memory it did not allocate");
  }
  std::free(p);
  return cudaSuccess;
}

// A synchronous free: waits for the work of the allocation's device first, as CUDA's does (for
// pinned host memory, the other devices' deferred copies from or into it run first too).
cudaError_t SynchronizeAndFree(void* p, const char* what) {
  if (p == nullptr) return cudaSuccess;
  const std::optional<Allocation> a = TheAllocations().Find(p);
  const int device = a.has_value() ? a->device : emu::CurrentDevice();
  if (a.has_value() && a->type == cudaMemoryTypeHost) {
    for (int d = 0; d < emu::DeviceCount(); ++d) {
      if (d != device) emu::RunDeviceDeferred(d);
    }
  }
  // A failed kernel's sticky error is answered, as CUDA's cudaFree does; the memory goes anyway.
  const cudaError_t e = emu::AwaitDevice(device, what);
  const cudaError_t freed = Free(p, what);
  return e != cudaSuccess ? Failed(e, what) : freed;
}

bool ValidDevice(int device) { return device >= 0 && device < emu::DeviceCount(); }

// Memory neither cudaMalloc nor cudaMallocHost gave.
bool Pageable(const void* p) { return !TheAllocations().Find(p).has_value(); }

// Copies, memsets and host functions are stream work (fake_streams.h): on a created stream
// deferred, in stream order, like kernels; on a default stream (the synchronous calls are the
// legacy one's) run at once. As CUDA does with pageable host memory, a copy from it reads it when
// issued (the caller may reuse it at once) and a copy into it has completed when the call
// returns.
cudaError_t Copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  cudaError_t e = cudaSuccess;
  if (bytes == 0 || Pageable(dst)) {
    e = emu::AwaitStream(stream, "a copy");
    if (e == cudaSuccess && bytes > 0) std::memmove(dst, src, bytes);
  } else {
    std::shared_ptr<std::vector<char>> staged;  // what a pageable source held when issued
    if (Pageable(src)) {
      staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                   static_cast<const char*>(src) + bytes);
      src = staged->data();
    }
    e = emu::Defer(
        stream,
        [dst, src, bytes, staged] {
          std::memmove(dst, src, bytes);
          return cudaSuccess;
        },
        "a copy");
  }
  return e == cudaSuccess ? e : Failed(e, "a copy: an invalid stream or an earlier kernel failed");
}
cudaError_t Set(void* p, int value, size_t bytes, cudaStream_t stream) {
  const cudaError_t e = emu::Defer(
      stream,
      [p, value, bytes] {
        if (bytes > 0) std::memset(p, value, bytes);
        return cudaSuccess;
      },
      "a memset");
  return e == cudaSuccess ? e
                          : Failed(e, "a memset: an invalid stream or an earlier kernel failed");
}

}  // namespace

namespace emu {

bool IsDeviceRange(const void* p, size_t bytes, int device) {
  const std::optional<Allocation> a = TheAllocations().Find(p);
  return a.has_value() && a->type == cudaMemoryTypeDevice && a->device == device &&
         reinterpret_cast<uintptr_t>(p) + bytes <= a->base + a->bytes;
}

}  // namespace emu

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = emu::DeviceCount();
  return *count > 0 ? cudaSuccess : Failed(cudaErrorNoDevice, "cudaGetDeviceCount");
}
cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (!ValidDevice(device)) return Failed(cudaErrorInvalidDevice, "cudaSetDevice");
  emu::SetCurrentDevice(device);
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = emu::CurrentDevice();
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!ValidDevice(device)) return Failed(cudaErrorInvalidDevice, "cudaGetDeviceProperties");
  std::memset(prop, 0, sizeof(*prop));
  std::strncpy(prop->name, "Emulated GPU (ringmaster cuda_emu)", sizeof(prop->name) - 1);
  prop->major = 9;
  prop->minor = 0;
  prop->totalGlobalMem = kMemoryBytes;
  prop->multiProcessorCount = 132;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->sharedMemPerBlock = 48 << 10;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = kMemoryBytes;
  *total_bytes = kMemoryBytes;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  *least = 0;  // an H100's range
  *greatest = -5;
  return cudaSuccess;
}
// Every pair of distinct emulated GPUs can reach each other (one NVLink domain).
cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (!ValidDevice(device) || !ValidDevice(peer)) {
    return Failed(cudaErrorInvalidDevice, "cudaDeviceCanAccessPeer");
  }
  *can = device != peer ? 1 : 0;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() { return emu::GetLastError(); }

cudaError_t cudaMalloc(void** p, size_t bytes) { return Allocate(p, bytes, cudaMemoryTypeDevice); }
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t) {
  return Allocate(p, bytes, cudaMemoryTypeDevice);
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  return Allocate(p, bytes, cudaMemoryTypeHost);
}
// What cuda_runtime.h's C++ overloads of cudaMallocHost call.
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  return Allocate(p, bytes, cudaMemoryTypeHost);
}
cudaError_t cudaFree(void* p) { return SynchronizeAndFree(p, "cudaFree"); }
cudaError_t cudaFreeHost(void* p) { return SynchronizeAndFree(p, "cudaFreeHost"); }
// Stream-ordered: the memory goes once the work pending on the stream has completed; the host
// does not wait.
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  if (p == nullptr) return cudaSuccess;
  const std::optional<Allocation> a = TheAllocations().Find(p);
  if (!a.has_value() || a->base != reinterpret_cast<uintptr_t>(p)) {
    return Failed(cudaErrorInvalidValue, "cudaFreeAsync of memory it did not allocate");
  }
  // Possibly on another thread, when the work completes: the memory was allocated (checked
  // above), so only a double cudaFreeAsync fails, reported on stderr.
  const cudaError_t e = emu::WhenStreamComplete(stream, [p] {
    if (!TheAllocations().Remove(p)) {
      std::fprintf(stderr, "cuda_emu: cudaFreeAsync of memory already freed\n");
      return;
    }
    std::free(p);
  });
  return e == cudaSuccess ? e : Failed(e, "cudaFreeAsync: stream");
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p) {
  std::memset(attr, 0, sizeof(*attr));
  const std::optional<Allocation> a = TheAllocations().Find(p);
  attr->type = a.has_value() ? a->type : cudaMemoryTypeUnregistered;
  attr->device = a.has_value() ? a->device : -1;
  attr->devicePointer = a.has_value() ? const_cast<void*>(p) : nullptr;
  attr->hostPointer =
      !a.has_value() || a->type == cudaMemoryTypeHost ? const_cast<void*>(p) : nullptr;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  return Copy(dst, src, bytes, nullptr);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                            cudaStream_t stream) {
  return Copy(dst, src, bytes, stream);
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) { return Set(p, value, bytes, nullptr); }
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  return Set(p, value, bytes, stream);
}

}  // extern "C"
