// Causal multi-head self-attention, the CPU reference of the device operation (OpenBLAS GEMMs
// per batch row and head, softmax in between).
//
// qkv is [B, T, 3C]: per token the C query, C key and C value channels, each NH heads of
// hs = C / NH channels. out is [B, T, C]; att is [B, NH, T, T] softmax probabilities (zero above
// the diagonal). Attention scores are scaled by 1/sqrt(hs).
#ifndef RINGMASTER_TRAINER_KERNELS_ATTENTION_H_
#define RINGMASTER_TRAINER_KERNELS_ATTENTION_H_

namespace ringmaster::kernels {

// Overwrites out and att.
void AttentionForwardCpu(float* out, float* att, const float* qkv, int B, int T, int C, int NH);

// Overwrites dqkv; datt is scratch of att's size.
void AttentionBackwardCpu(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_ATTENTION_H_
