// Raw launchers of layernorm.cu (layernorm.h's operations), free of Abseil; callers use
// layernorm_cuda.h. Statistics (mean, rstd) are fp32; activations and parameters fp32 or bf16,
// computed in fp32 and rounded once when stored.
#ifndef RINGMASTER_TRAINER_KERNELS_LAYERNORM_LAUNCH_H_
#define RINGMASTER_TRAINER_KERNELS_LAYERNORM_LAUNCH_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace ringmaster::kernels {

// LayerNormForwardCpu: out, mean, rstd overwritten; with residual_b not null the input is
// residual = inp + residual_b (written, rounded to the element type, then normalised as
// stored; residual may alias inp). One warp per row.
cudaError_t LaunchLayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                   const float* residual_b, float* residual, const float* weight,
                                   const float* bias, int N, int C, cudaStream_t stream);
cudaError_t LaunchLayerNormForward(__nv_bfloat16* out, float* mean, float* rstd,
                                   const __nv_bfloat16* inp, const __nv_bfloat16* residual_b,
                                   __nv_bfloat16* residual, const __nv_bfloat16* weight,
                                   const __nv_bfloat16* bias, int N, int C, cudaStream_t stream);

// LayerNormBackwardCpu: accumulates dinp, dweight, dbias (dbias may be null). `scratch` holds
// 2 * ColumnReduceScratch(C, ColumnReduceSplits(N)) floats (launch_shape.h). Three kernels:
// dinp (a warp per row), then the weight and bias gradients as deterministic column sums.
cudaError_t LaunchLayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                                    const float* inp, const float* weight, const float* mean,
                                    const float* rstd, int N, int C, float* scratch,
                                    cudaStream_t stream);
cudaError_t LaunchLayerNormBackward(__nv_bfloat16* dinp, __nv_bfloat16* dweight,
                                    __nv_bfloat16* dbias, const __nv_bfloat16* dout,
                                    const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                                    const float* mean, const float* rstd, int N, int C,
                                    float* scratch, cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_LAYERNORM_LAUNCH_H_
