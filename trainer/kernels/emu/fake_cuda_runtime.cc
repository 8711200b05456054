// The CUDA runtime calls of the trainer's CUDA code, answered on the CPU for the emulated
// configuration (--config=emu, cuda_emu.h): one "device" whose memory is host memory, streams
// and events that are already complete (emulated kernels run when launched), and the launch
// errors of the emulator. Linked into a test binary, these definitions take precedence over
// libcudart's for every call the binary makes. Only the calls the trainer makes; the error
// strings still come from libcudart.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "trainer/kernels/emu/cuda_emu.h"

namespace {

// GPU allocations are 256-byte aligned; cuBLASLt plans depend on pointer alignment.
constexpr size_t kAlignment = 256;
constexpr size_t kMemoryBytes = size_t{80} << 30;

// A failed call is also the thread's last error, as in CUDA.
cudaError_t Failed(cudaError_t error, const char* what) {
  emu::RecordError(error, what);
  return error;
}

// Filled with 0xff bytes (NaN as fp32 and bf16), since device memory is not zeroed: a kernel
// reading what nobody wrote shows.
cudaError_t Allocate(void** p, size_t bytes) {
  if (p == nullptr) return Failed(cudaErrorInvalidValue, "allocation without a pointer");
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  *p = std::aligned_alloc(kAlignment, rounded);
  if (*p == nullptr) return Failed(cudaErrorMemoryAllocation, "out of host memory");
  std::memset(*p, 0xff, rounded);
  return cudaSuccess;
}

// A distinct non-null handle for streams and events.
template <typename Handle>
Handle NewHandle() {
  return reinterpret_cast<Handle>(new char);
}
template <typename Handle>
void DeleteHandle(Handle h) {
  delete reinterpret_cast<char*>(h);
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
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
  return device == 0 ? cudaSuccess : Failed(cudaErrorInvalidDevice, "cudaSetDevice: one device");
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return Failed(cudaErrorInvalidDevice, "cudaGetDeviceProperties: one device");
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
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaGetLastError() { return emu::GetLastError(); }

cudaError_t cudaMalloc(void** p, size_t bytes) { return Allocate(p, bytes); }
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t) { return Allocate(p, bytes); }
cudaError_t cudaMallocHost(void** p, size_t bytes) { return Allocate(p, bytes); }
// What cuda_runtime.h's C++ overloads of cudaMallocHost call.
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) { return Allocate(p, bytes); }
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  if (bytes > 0) std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) {
  return cudaMemset(p, value, bytes);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = NewHandle<cudaStream_t>();
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int) {
  return cudaStreamCreateWithFlags(stream, flags);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  DeleteHandle(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; }
cudaError_t cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t fn, void* data) {
  fn(data);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = NewHandle<cudaEvent_t>();
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  return cudaEventCreate(event);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  DeleteHandle(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0;
  return cudaSuccess;
}

}  // extern "C"
