#include <cub/device/device_radix_sort.cuh>

#include "trainer/kernels/embedding_launch.h"
#include "trainer/kernels/kernel_utils.cuh"
#include "trainer/kernels/launch_shape.h"

namespace ringmaster::kernels {
namespace {

constexpr int kTokenThreads = 256;

size_t Align(size_t bytes) { return (bytes + 255) / 256 * 256; }

template <typename T>
__global__ void ForwardKernel(T* out, const int32_t* tokens, const T* wte, const T* wpe, int T_,
                              int C, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / C;
    const int c = static_cast<int>(i % C);
    const int t = static_cast<int>(row % T_);
    Store(out + i, Load(wte + int64_t{tokens[row]} * C + c) + Load(wpe + int64_t{t} * C + c));
  }
}

__global__ void IotaKernel(int32_t* values, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    values[i] = i;
  }
}

// Rows of a run loaded ahead of their additions: the loads are independent, so a thread keeps
// this many in flight instead of one (a frequent token, e.g. a newline, has runs of thousands).
constexpr int kRunUnroll = 8;

// Block i handles sorted entry i if it starts a run of equal tokens: it adds the run's rows of
// dout (ascending positions, as the stable sort left them) to the token's row of dwte, in that
// order, exactly as the CPU reference does. The block first finds where the run ends, blockDim
// entries at a time, so that the additions do not wait on a token comparison each.
template <typename T>
__global__ void TokenGradKernel(T* dwte, const T* dout, const int32_t* sorted_tokens,
                                const int32_t* sorted_positions, int N, int C) {
  const int i = blockIdx.x;
  const int32_t token = sorted_tokens[i];
  if (i > 0 && sorted_tokens[i - 1] == token) return;  // the whole block: uniform
  int end = i;
  for (int base = i;; base += blockDim.x) {
    const int j = base + threadIdx.x;
    // The run is contiguous from i, so the entries of this chunk in it are its first `in_run`.
    const int in_run = __syncthreads_count(j < N && sorted_tokens[j] == token);
    end = base + in_run;
    if (in_run < static_cast<int>(blockDim.x)) break;
  }
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = Load(dwte + int64_t{token} * C + c);
    int j = i;
    for (; j + kRunUnroll <= end; j += kRunUnroll) {
      float rows[kRunUnroll];
#pragma unroll
      for (int u = 0; u < kRunUnroll; ++u) {
        rows[u] = Load(dout + int64_t{sorted_positions[j + u]} * C + c);
      }
#pragma unroll
      for (int u = 0; u < kRunUnroll; ++u) acc += rows[u];
    }
    for (; j < end; ++j) acc += Load(dout + int64_t{sorted_positions[j]} * C + c);
    Store(dwte + int64_t{token} * C + c, acc);
  }
}

// dwpe[t, c] += dout[b, t, c] over b in order.
template <typename T>
__global__ void PositionGradKernel(T* dwpe, const T* dout, int B, int T_, int C) {
  const int64_t n = int64_t{T_} * C;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float acc = Load(dwpe + i);
    for (int b = 0; b < B; ++b) acc += Load(dout + int64_t{b} * n + i);
    Store(dwpe + i, acc);
  }
}

cudaError_t SortTempBytes(int N, size_t* bytes) {
  return cub::DeviceRadixSort::SortPairs(
      nullptr, *bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), N);
}

template <typename T>
cudaError_t Forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_, int C,
                    cudaStream_t stream) {
  ClearStaleError();
  const int64_t n = int64_t{B} * T_ * C;
  if (n == 0) return cudaSuccess;
  ForwardKernel<<<GridStrideBlocks(n, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(
      out, tokens, wte, wpe, T_, C, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t Backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int T_, int C,
                     void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  ClearStaleError();
  const int N = B * T_;
  if (N == 0 || C == 0) return cudaSuccess;
  if (dwpe != nullptr) {
    PositionGradKernel<<<GridStrideBlocks(int64_t{T_} * C, kElementwiseThreads),
                         kElementwiseThreads, 0, stream>>>(dwpe, dout, B, T_, C);
  }
  if (dwte == nullptr) return cudaGetLastError();
  size_t temp_bytes = 0;
  cudaError_t err = SortTempBytes(N, &temp_bytes);
  if (err != cudaSuccess) return err;
  const size_t ints = Align(sizeof(int32_t) * N);
  if (scratch_bytes < 3 * ints + temp_bytes) return cudaErrorInvalidValue;
  char* base = static_cast<char*>(scratch);
  int32_t* sorted_tokens = reinterpret_cast<int32_t*>(base);
  int32_t* positions = reinterpret_cast<int32_t*>(base + ints);
  int32_t* sorted_positions = reinterpret_cast<int32_t*>(base + 2 * ints);
  void* temp = base + 3 * ints;
  IotaKernel<<<GridStrideBlocks(N, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(
      positions, N);
  err = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, sorted_tokens, positions,
                                        sorted_positions, N, 0, 32, stream);
  if (err != cudaSuccess) return err;
  TokenGradKernel<<<N, kTokenThreads, 0, stream>>>(dwte, dout, sorted_tokens, sorted_positions, N,
                                                   C);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchEmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                                   const float* wpe, int B, int T, int C, cudaStream_t stream) {
  return Forward(out, tokens, wte, wpe, B, T, C, stream);
}
cudaError_t LaunchEmbeddingForward(__nv_bfloat16* out, const int32_t* tokens,
                                   const __nv_bfloat16* wte, const __nv_bfloat16* wpe, int B, int T,
                                   int C, cudaStream_t stream) {
  return Forward(out, tokens, wte, wpe, B, T, C, stream);
}

cudaError_t EmbeddingBackwardScratchBytes(int N, size_t* bytes) {
  size_t temp_bytes = 0;
  cudaError_t err = SortTempBytes(N, &temp_bytes);
  if (err != cudaSuccess) return err;
  *bytes = 3 * Align(sizeof(int32_t) * N) + temp_bytes;
  return cudaSuccess;
}

cudaError_t LaunchEmbeddingBackward(float* dwte, float* dwpe, const float* dout,
                                    const int32_t* tokens, int B, int T, int C, void* scratch,
                                    size_t scratch_bytes, cudaStream_t stream) {
  return Backward(dwte, dwpe, dout, tokens, B, T, C, scratch, scratch_bytes, stream);
}
cudaError_t LaunchEmbeddingBackward(__nv_bfloat16* dwte, __nv_bfloat16* dwpe,
                                    const __nv_bfloat16* dout, const int32_t* tokens, int B, int T,
                                    int C, void* scratch, size_t scratch_bytes,
                                    cudaStream_t stream) {
  return Backward(dwte, dwpe, dout, tokens, B, T, C, scratch, scratch_bytes, stream);
}

}  // namespace ringmaster::kernels
