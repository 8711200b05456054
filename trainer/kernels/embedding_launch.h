// Raw launchers of embedding.cu (embedding.h's operations), free of Abseil; callers use
// embedding_cuda.h. Token ids are int32 device memory.
//
// The backward pass is deterministic without atomics: the (token, position) pairs are sorted by
// token (a stable radix sort), and one block per distinct token adds that token's rows of dout
// in position order, so fp32 results equal the CPU reference's bit for bit.
#ifndef RINGMASTER_TRAINER_KERNELS_EMBEDDING_LAUNCH_H_
#define RINGMASTER_TRAINER_KERNELS_EMBEDDING_LAUNCH_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ringmaster::kernels {

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]. Overwrites.
cudaError_t LaunchEmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                                   const float* wpe, int B, int T, int C, cudaStream_t stream);
cudaError_t LaunchEmbeddingForward(__nv_bfloat16* out, const int32_t* tokens,
                                   const __nv_bfloat16* wte, const __nv_bfloat16* wpe, int B, int T,
                                   int C, cudaStream_t stream);

// Bytes of scratch the backward pass needs for N = B * T tokens (sort buffers and the radix
// sort's temporary storage); fills *bytes.
cudaError_t EmbeddingBackwardScratchBytes(int N, size_t* bytes);

// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]; either may be null.
cudaError_t LaunchEmbeddingBackward(float* dwte, float* dwpe, const float* dout,
                                    const int32_t* tokens, int B, int T, int C, void* scratch,
                                    size_t scratch_bytes, cudaStream_t stream);
cudaError_t LaunchEmbeddingBackward(__nv_bfloat16* dwte, __nv_bfloat16* dwpe,
                                    const __nv_bfloat16* dout, const int32_t* tokens, int B, int T,
                                    int C, void* scratch, size_t scratch_bytes,
                                    cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_EMBEDDING_LAUNCH_H_
