// Causal multi-head self-attention, the CPU reference of the device operation (OpenBLAS GEMMs
// per batch row and head, softmax in between).
//
// qkv is [B, T, 3C]: per token the C query, C key and C value channels, each NH heads of
// hs = C / NH channels. out is [B, T, C]; att is [B, NH, T, T] softmax probabilities (zero above
// the diagonal). Attention scores are scaled by 1/sqrt(hs).
#ifndef RINGMASTER_TRAINER_KERNELS_ATTENTION_H_
#define RINGMASTER_TRAINER_KERNELS_ATTENTION_H_

#include <cstdint>

namespace ringmaster::kernels {

// Overwrites out and att.
void AttentionForwardCpu(float* out, float* att, const float* qkv, int B, int T, int C, int NH);

// Overwrites dqkv; datt is scratch of att's size.
void AttentionBackwardCpu(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH);

// The softmax between the GEMMs, in place over `rows` rows of T scores, row r being query
// position r % T: softmax over columns 0..r%T, zeros above the diagonal.
void CausalSoftmaxCpu(float* att, int64_t rows, int T);
// Its backward, in place: datt = att * (datt - sum(att * datt)) over the same columns; zeros
// above the diagonal.
void CausalSoftmaxBackwardCpu(float* datt, const float* att, int64_t rows, int T);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_ATTENTION_H_
