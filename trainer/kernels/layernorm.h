// LayerNorm over the last dimension (eps 1e-5), the CPU reference of the device operation.
// Rows are N vectors of C floats.
#ifndef RINGMASTER_TRAINER_KERNELS_LAYERNORM_H_
#define RINGMASTER_TRAINER_KERNELS_LAYERNORM_H_

namespace ringmaster::kernels {

constexpr float kLayerNormEpsilon = 1e-5f;

// out = (inp - mean) * rstd * weight + bias per row; writes mean[N] and rstd[N]. Overwrites.
// `residual_b` not null: the input is inp + residual_b, which is also written to `residual`
// (the fused residual add; `residual` may alias `inp`).
void LayerNormForwardCpu(float* out, float* mean, float* rstd, const float* inp,
                         const float* residual_b, float* residual, const float* weight,
                         const float* bias, int N, int C);

// Accumulates dinp, dweight, dbias (dbias may be null).
void LayerNormBackwardCpu(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_LAYERNORM_H_
