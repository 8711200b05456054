// Reductions of the Device interface, the CPU references of the CUDA kernels in sum_squares.cu
// and column_sums.cu.
#ifndef RINGMASTER_TRAINER_KERNELS_REDUCE_H_
#define RINGMASTER_TRAINER_KERNELS_REDUCE_H_

#include <cstdint>

namespace ringmaster::kernels {

// Sum of x[i]^2 in double precision (each square formed in double).
double SumSquaresCpu(const float* x, int64_t n);

// out[c] (+)= sum over rows r of in[r, c], row-major in[rows, cols]; accumulates into out when
// `accumulate`, overwrites otherwise. The bias gradient of a dense layer.
void ColumnSumsCpu(float* out, const float* in, int rows, int cols, bool accumulate);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_REDUCE_H_
