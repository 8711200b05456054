// Dense layers, the CPU reference of the device operations (OpenBLAS sgemm plus the epilogues).
#ifndef RINGMASTER_TRAINER_KERNELS_MATMUL_H_
#define RINGMASTER_TRAINER_KERNELS_MATMUL_H_

namespace ringmaster::kernels {

// out[N,OC] = inp[N,IC] weight[OC,IC]^T + bias (bias may be null). With gelu_out not null,
// also gelu_out = GELU(out). Overwrites.
void MatmulForwardCpu(float* out, float* gelu_out, const float* inp, const float* weight,
                      const float* bias, int N, int IC, int OC);

// dinp = dout weight (overwrites; skipped when null); dweight += dout^T inp;
// dbias += column sums of dout (skipped when null).
void MatmulBackwardCpu(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int IC, int OC);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_MATMUL_H_
