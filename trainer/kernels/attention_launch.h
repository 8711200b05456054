// Raw launchers of attention_softmax.cu, the causal softmax passes of attention (see
// attention_schedule.h), free of Abseil; callers use attention_cuda.h. `att` holds `rows` rows
// of T scores, row r being query position r % T (rows = B * NH * T). One warp per row, fp32
// arithmetic.
#ifndef RINGMASTER_TRAINER_KERNELS_ATTENTION_LAUNCH_H_
#define RINGMASTER_TRAINER_KERNELS_ATTENTION_LAUNCH_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ringmaster::kernels {

// In place: softmax over columns 0..r%T of each row, zeros above the diagonal.
cudaError_t LaunchCausalSoftmax(float* att, int64_t rows, int T, cudaStream_t stream);
cudaError_t LaunchCausalSoftmax(__nv_bfloat16* att, int64_t rows, int T, cudaStream_t stream);

// In place: datt = att * (datt - sum(att * datt)) over the causal columns, zeros above.
cudaError_t LaunchCausalSoftmaxBackward(float* datt, const float* att, int64_t rows, int T,
                                        cudaStream_t stream);
cudaError_t LaunchCausalSoftmaxBackward(__nv_bfloat16* datt, const __nv_bfloat16* att, int64_t rows,
                                        int T, cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_ATTENTION_LAUNCH_H_
