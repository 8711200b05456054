// Causal multi-head attention on the GPU (attention.h's operations), two ways:
//  - materialised: attention_schedule.h's steps with cuBLAS strided-batched GEMMs (fp32
//    accumulation) and attention_softmax.cu's kernels; the probabilities `att` [B, NH, T, T]
//    are kept for the backward pass in the element type;
//  - fused: flash_attention_launch.h's kernels (bf16, head size 32 or 64), which keep only each
//    row's log-sum-exp in `att` (fp32) and recompute the probabilities in the backward pass.
// Tensors are device memory of `type`; work is enqueued on `stream` (set on `cublas` for the
// call).
#ifndef RINGMASTER_TRAINER_KERNELS_ATTENTION_CUDA_H_
#define RINGMASTER_TRAINER_KERNELS_ATTENTION_CUDA_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "trainer/kernels/gemm_plan.h"

namespace ringmaster::kernels {

enum class AttentionImpl { kMaterialized, kFused };

// The fused kernels for bf16 and a head size they take, when `allow_fused`; else materialised.
AttentionImpl ChooseAttention(ElementType type, int C, int NH, bool allow_fused);

// Elements of `type` that `att` (and the backward pass's scratch `datt`) must have: B*NH*T*T
// probabilities, or for the fused kernels B*NH*T fp32 values, rounded up to whole 16 bytes (so
// that what is carved after it stays as aligned as it was).
int64_t AttentionStateElements(AttentionImpl impl, ElementType type, int B, int T, int NH);

// out and att overwritten. INVALID_ARGUMENT for kFused where ChooseAttention would not choose
// it, or with tensors not 16-byte aligned.
absl::Status AttentionForwardCuda(AttentionImpl impl, cublasHandle_t cublas, ElementType type,
                                  void* out, void* att, const void* qkv, int B, int T, int C,
                                  int NH, cudaStream_t stream);

// dqkv overwritten; datt is scratch of att's size; out (used by kFused) and att are the forward
// pass's.
absl::Status AttentionBackwardCuda(AttentionImpl impl, cublasHandle_t cublas, ElementType type,
                                   void* dqkv, void* datt, const void* dout, const void* out,
                                   const void* qkv, const void* att, int B, int T, int C, int NH,
                                   cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_ATTENTION_CUDA_H_
