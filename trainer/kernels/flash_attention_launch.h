// Raw launchers of flash_attention.cu, fused causal attention (FlashAttention-2's algorithm) in
// bf16 on the tensor cores, free of Abseil; callers use attention_cuda.h.
//
// Same operation as attention.h (qkv [B, T, 3C], out [B, T, C], NH heads of C / NH channels,
// scores scaled by 1/sqrt(C / NH)), without the [B, NH, T, T] probabilities: the forward pass
// keeps, per row, the base-2 log of its softmax denominator (`lse`, fp32 [B, NH, T]), and the
// backward pass recomputes the probabilities tile by tile from it. Each 64 x 64 tile of scores
// lives in shared memory only; the softmax is the online one (running maximum and sum, fp32);
// the probabilities and score gradients enter the tensor-core products rounded to bf16.
//
// The backward pass is deterministic (no atomics): one kernel gives each block 64 keys and
// walks the queries after them (dK, dV), another gives each block 64 queries and walks the keys
// before them (dQ), both after a kernel computing each row's dot(dout, out) (`delta`).
#ifndef RINGMASTER_TRAINER_KERNELS_FLASH_ATTENTION_LAUNCH_H_
#define RINGMASTER_TRAINER_KERNELS_FLASH_ATTENTION_LAUNCH_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace ringmaster::kernels {

// Whether the kernels take heads of C / NH channels: 32 or 64 (every GPT-2 size has 64).
bool FlashAttentionSupports(int C, int NH);

// out and lse overwritten. The bf16 tensors must be 16-byte aligned and the fp32 ones 4-byte
// aligned (cudaErrorInvalidValue otherwise, as for a shape FlashAttentionSupports refuses, or
// more than 65535 64-row tiles). B or T of 0: nothing to do.
cudaError_t LaunchFlashAttentionForward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv,
                                        int B, int T, int C, int NH, cudaStream_t stream);

// dqkv overwritten; `delta` is fp32 scratch of lse's size; `out` and `lse` are the forward
// pass's.
cudaError_t LaunchFlashAttentionBackward(__nv_bfloat16* dqkv, float* delta,
                                         const __nv_bfloat16* dout, const __nv_bfloat16* out,
                                         const __nv_bfloat16* qkv, const float* lse, int B, int T,
                                         int C, int NH, cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_FLASH_ATTENTION_LAUNCH_H_
