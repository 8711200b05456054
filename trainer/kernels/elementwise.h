// Elementwise operations of the Device interface (Add, Scale, the bias add of a dense layer),
// the CPU references of the CUDA kernels in elementwise.cu. All arrays hold fp32 here; the CUDA
// kernels also take bf16 and compute in fp32, rounding once when they store.
#ifndef RINGMASTER_TRAINER_KERNELS_ELEMENTWISE_H_
#define RINGMASTER_TRAINER_KERNELS_ELEMENTWISE_H_

#include <cstdint>

namespace ringmaster::kernels {

// out[i] = a[i] + b[i]. Overwrites; out may alias a or b.
void AddCpu(float* out, const float* a, const float* b, int64_t n);

// x[i] *= factor.
void ScaleCpu(float* x, float factor, int64_t n);

// out[r, c] += bias[c] for r < rows, c < cols (row-major out).
void AddBiasCpu(float* out, const float* bias, int rows, int cols);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_ELEMENTWISE_H_
