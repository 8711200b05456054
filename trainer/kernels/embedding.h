// Token + position embeddings, the CPU reference of the device operations.
#ifndef RINGMASTER_TRAINER_KERNELS_EMBEDDING_H_
#define RINGMASTER_TRAINER_KERNELS_EMBEDDING_H_

#include <cstdint>

namespace ringmaster::kernels {

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]. Overwrites.
void EmbeddingForwardCpu(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int B, int T, int C);

// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]. Either may be null.
void EmbeddingBackwardCpu(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int B, int T, int C);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_EMBEDDING_H_
