#include "trainer/kernels/kernel_utils.cuh"
#include "trainer/kernels/launch_shape.h"
#include "trainer/kernels/layernorm.h"
#include "trainer/kernels/layernorm_launch.h"

namespace ringmaster::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kColumns = 32;
constexpr int kRowLanes = 8;

// One warp per row; lane l handles channels l, l + 32, ...
template <typename T>
__global__ void ForwardKernel(T* out, float* mean, float* rstd, const T* inp, const T* residual_b,
                              T* residual, const T* weight, const T* bias, int N, int C) {
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  if (residual_b != nullptr) {
    const T* b = residual_b + row * C;
    T* r = residual + row * C;
    // Each lane writes, then reads back, only its own channels.
    for (int c = lane; c < C; c += 32) Store(r + c, Load(x + c) + Load(b + c));
    x = r;
  }
  float sum = 0;
  for (int c = lane; c < C; c += 32) sum += Load(x + c);
  const float m = device::WarpSum(sum) / C;
  float var = 0;
  for (int c = lane; c < C; c += 32) {
    const float d = Load(x + c) - m;
    var += d * d;
  }
  const float s = 1.0f / sqrtf(device::WarpSum(var) / C + kLayerNormEpsilon);
  T* o = out + row * C;
  for (int c = lane; c < C; c += 32) {
    Store(o + c, (Load(x + c) - m) * s * Load(weight + c) + Load(bias + c));
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

template <typename T>
__global__ void BackwardInputKernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                    const float* mean, const float* rstd, int N, int C) {
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* dy = dout + row * C;
  const T* x = inp + row * C;
  T* dx = dinp + row * C;
  const float m = mean[row];
  const float s = rstd[row];
  float dnorm_mean = 0, dnorm_norm_mean = 0;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (Load(x + c) - m) * s;
    const float dnorm = Load(weight + c) * Load(dy + c);
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * xhat;
  }
  dnorm_mean = device::WarpSum(dnorm_mean) / C;
  dnorm_norm_mean = device::WarpSum(dnorm_norm_mean) / C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (Load(x + c) - m) * s;
    const float dnorm = Load(weight + c) * Load(dy + c);
    Store(dx + c, Load(dx + c) + (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * s);
  }
}

// The vectorized kernels: one warp per row as above, the row in registers (lane l holds
// vectors l, l + 32, ... of 16 bytes: Pack16, kChunks of them), read from memory once. Taken when
// every row is a whole number of aligned vectors and fits (launch_shape.h's WarpRowChunks).
template <typename T, int kChunks>
__global__ void ForwardVecKernel(T* out, float* mean, float* rstd, const T* inp,
                                 const T* residual_b, T* residual, const T* weight, const T* bias,
                                 int N, int C) {
  constexpr int kV = Pack16<T>::kSize;
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  Pack16<T> x[kChunks];
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = (k * 32 + lane) * kV;
    if (c < C) x[k] = LoadPack(inp + row * C + c);
  }
  if (residual_b != nullptr) {
    // The residual sum is rounded to T once, stored, and normalised as stored.
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int c = (k * 32 + lane) * kV;
      if (c >= C) continue;
      const Pack16<T> b = LoadPack(residual_b + row * C + c);
#pragma unroll
      for (int i = 0; i < kV; ++i) x[k].Set(i, x[k].Get(i) + b.Get(i));
      StorePack(residual + row * C + c, x[k]);
    }
  }
  float sum = 0;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    if ((k * 32 + lane) * kV >= C) continue;
#pragma unroll
    for (int i = 0; i < kV; ++i) sum += x[k].Get(i);
  }
  const float m = device::WarpSum(sum) / C;
  float var = 0;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    if ((k * 32 + lane) * kV >= C) continue;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const float d = x[k].Get(i) - m;
      var += d * d;
    }
  }
  const float s = 1.0f / sqrtf(device::WarpSum(var) / C + kLayerNormEpsilon);
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = (k * 32 + lane) * kV;
    if (c >= C) continue;
    const Pack16<T> w = LoadPack(weight + c), b = LoadPack(bias + c);
    Pack16<T> o;
#pragma unroll
    for (int i = 0; i < kV; ++i) o.Set(i, (x[k].Get(i) - m) * s * w.Get(i) + b.Get(i));
    StorePack(out + row * C + c, o);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

template <typename T, int kChunks>
__global__ void BackwardInputVecKernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                       const float* mean, const float* rstd, int N, int C) {
  constexpr int kV = Pack16<T>::kSize;
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  // Every load first, so that they are all in flight at once.
  Pack16<T> x[kChunks], dy[kChunks], dx[kChunks];
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = (k * 32 + lane) * kV;
    if (c >= C) continue;
    x[k] = LoadPack(inp + row * C + c);
    dy[k] = LoadPack(dout + row * C + c);
    dx[k] = LoadPack(dinp + row * C + c);
  }
  const float m = mean[row];
  const float s = rstd[row];
  float dnorm_mean = 0, dnorm_norm_mean = 0;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = (k * 32 + lane) * kV;
    if (c >= C) continue;
    const Pack16<T> w = LoadPack(weight + c);
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const float dnorm = w.Get(i) * dy[k].Get(i);
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * ((x[k].Get(i) - m) * s);
    }
  }
  dnorm_mean = device::WarpSum(dnorm_mean) / C;
  dnorm_norm_mean = device::WarpSum(dnorm_norm_mean) / C;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = (k * 32 + lane) * kV;
    if (c >= C) continue;
    const Pack16<T> w = LoadPack(weight + c);
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const float xhat = (x[k].Get(i) - m) * s;
      const float dnorm = w.Get(i) * dy[k].Get(i);
      dx[k].Set(i, dx[k].Get(i) + (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * s);
    }
    StorePack(dinp + row * C + c, dx[k]);
  }
}

// Partial sums of dweight = sum xhat * dy and dbias = sum dy over one slice of the rows (see
// reduce.cu's column sums for the slicing).
template <typename T>
__global__ void ParamPartialKernel(const T* dout, const T* inp, const float* mean,
                                   const float* rstd, int N, int C, int splits,
                                   float* dweight_partials, float* dbias_partials) {
  __shared__ float shared_w[kRowLanes][kColumns + 1];
  __shared__ float shared_b[kRowLanes][kColumns + 1];
  const int c = blockIdx.x * kColumns + threadIdx.x;
  float dw = 0, db = 0;
  if (c < C) {
    for (int64_t r = int64_t{blockIdx.y} * kRowLanes + threadIdx.y; r < N;
         r += int64_t{splits} * kRowLanes) {
      const float dy = Load(dout + r * C + c);
      const float xhat = (Load(inp + r * C + c) - mean[r]) * rstd[r];
      dw += xhat * dy;
      db += dy;
    }
  }
  shared_w[threadIdx.y][threadIdx.x] = dw;
  shared_b[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float sw = 0, sb = 0;
    for (int y = 0; y < kRowLanes; ++y) {
      sw += shared_w[y][threadIdx.x];
      sb += shared_b[y][threadIdx.x];
    }
    dweight_partials[int64_t{blockIdx.y} * C + c] = sw;
    dbias_partials[int64_t{blockIdx.y} * C + c] = sb;
  }
}

template <typename T>
__global__ void ParamFinishKernel(T* dweight, T* dbias, const float* dweight_partials,
                                  const float* dbias_partials, int C, int splits) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    float sw = 0, sb = 0;
    for (int s = 0; s < splits; ++s) {
      sw += dweight_partials[int64_t{s} * C + c];
      sb += dbias_partials[int64_t{s} * C + c];
    }
    Store(dweight + c, Load(dweight + c) + sw);
    if (dbias != nullptr) Store(dbias + c, Load(dbias + c) + sb);
  }
}

template <typename T>
cudaError_t Forward(T* out, float* mean, float* rstd, const T* inp, const T* residual_b,
                    T* residual, const T* weight, const T* bias, int N, int C,
                    cudaStream_t stream) {
  ClearStaleError();
  if (N == 0) return cudaSuccess;
  const bool vectors =
      RowsVectorizable(C, sizeof(T), {out, inp, residual_b, residual, weight, bias});
  const auto blocks = WarpPerRowBlocks(N, kWarpsPerBlock);
  if (!LaunchWarpRowVariant(vectors ? WarpRowChunks(C, sizeof(T)) : 0, [&](auto chunks) {
        constexpr int kChunks = decltype(chunks)::value;
        ForwardVecKernel<T, kChunks><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
            out, mean, rstd, inp, residual_b, residual, weight, bias, N, C);
      })) {
    ForwardKernel<<<blocks, kWarpsPerBlock * 32, 0, stream>>>(out, mean, rstd, inp, residual_b,
                                                              residual, weight, bias, N, C);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t Backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     const float* mean, const float* rstd, int N, int C, float* scratch,
                     cudaStream_t stream) {
  ClearStaleError();
  if (N == 0 || C == 0) return cudaSuccess;
  const bool vectors = RowsVectorizable(C, sizeof(T), {dinp, dout, inp, weight});
  const auto blocks = WarpPerRowBlocks(N, kWarpsPerBlock);
  if (!LaunchWarpRowVariant(vectors ? WarpRowChunks(C, sizeof(T)) : 0, [&](auto chunks) {
        constexpr int kChunks = decltype(chunks)::value;
        BackwardInputVecKernel<T, kChunks><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
            dinp, dout, inp, weight, mean, rstd, N, C);
      })) {
    BackwardInputKernel<<<blocks, kWarpsPerBlock * 32, 0, stream>>>(dinp, dout, inp, weight, mean,
                                                                    rstd, N, C);
  }
  const int splits = ColumnReduceSplits(N);
  float* dweight_partials = scratch;
  float* dbias_partials = scratch + ColumnReduceScratch(C, splits);
  const dim3 grid((C + kColumns - 1) / kColumns, splits);
  ParamPartialKernel<<<grid, dim3(kColumns, kRowLanes), 0, stream>>>(
      dout, inp, mean, rstd, N, C, splits, dweight_partials, dbias_partials);
  ParamFinishKernel<<<GridStrideBlocks(C, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(
      dweight, dbias, dweight_partials, dbias_partials, C, splits);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchLayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                   const float* residual_b, float* residual, const float* weight,
                                   const float* bias, int N, int C, cudaStream_t stream) {
  return Forward(out, mean, rstd, inp, residual_b, residual, weight, bias, N, C, stream);
}
cudaError_t LaunchLayerNormForward(__nv_bfloat16* out, float* mean, float* rstd,
                                   const __nv_bfloat16* inp, const __nv_bfloat16* residual_b,
                                   __nv_bfloat16* residual, const __nv_bfloat16* weight,
                                   const __nv_bfloat16* bias, int N, int C, cudaStream_t stream) {
  return Forward(out, mean, rstd, inp, residual_b, residual, weight, bias, N, C, stream);
}
cudaError_t LaunchLayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                                    const float* inp, const float* weight, const float* mean,
                                    const float* rstd, int N, int C, float* scratch,
                                    cudaStream_t stream) {
  return Backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, scratch, stream);
}
cudaError_t LaunchLayerNormBackward(__nv_bfloat16* dinp, __nv_bfloat16* dweight,
                                    __nv_bfloat16* dbias, const __nv_bfloat16* dout,
                                    const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                                    const float* mean, const float* rstd, int N, int C,
                                    float* scratch, cudaStream_t stream) {
  return Backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, scratch, stream);
}

}  // namespace ringmaster::kernels
