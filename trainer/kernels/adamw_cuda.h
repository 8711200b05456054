// CUDA implementation of adamw.h's update on device pointers, enqueued on `stream`: fp32 master
// weights and moments, gradients in the compute type (fp32 or bf16), and optionally a working
// copy of the weights in the compute type that receives the updated master rounded once.
#ifndef RINGMASTER_TRAINER_KERNELS_ADAMW_CUDA_H_
#define RINGMASTER_TRAINER_KERNELS_ADAMW_CUDA_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "trainer/kernels/adamw_hyper.h"

namespace ringmaster::kernels {

// working may be null (fp32 training, where the master is the working copy).
absl::Status AdamWCuda(float* master, float* working, const float* grad, float* m, float* v,
                       int64_t n, const AdamWHyper& h, cudaStream_t stream);
absl::Status AdamWCuda(float* master, __nv_bfloat16* working, const __nv_bfloat16* grad, float* m,
                       float* v, int64_t n, const AdamWHyper& h, cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_ADAMW_CUDA_H_
