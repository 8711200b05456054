// Naive GEMMs for the CPU tests of the GEMM planning and schedules: a row-major one (the
// model's convention) and a column-major one (cuBLAS's), both summing in the same order; and the
// random inputs those tests feed them. Pure functions: thread-safe, no errors.
#ifndef RINGMASTER_TRAINER_KERNELS_GEMM_TEST_UTIL_H_
#define RINGMASTER_TRAINER_KERNELS_GEMM_TEST_UTIL_H_

#include <cstddef>
#include <vector>

#include "trainer/kernels/gemm_plan.h"

namespace ringmaster::kernels::testing {

// c = alpha op(a) op(b) + beta c, row-major (`g` as documented in gemm_plan.h).
void NaiveRowMajorGemm(const RowMajorGemm& g, float alpha, const float* a, const float* b,
                       float beta, float* c);

// C = alpha op(A) op(B) + beta C, column-major.
void NaiveColumnMajorGemm(const ColumnMajorGemm& g, float alpha, const float* A, const float* B,
                          float beta, float* C);

// `n` floats uniform in [-1, 1) from std::mt19937(seed): the same values for the same seed.
std::vector<float> RandomVector(size_t n, int seed);

}  // namespace ringmaster::kernels::testing

#endif  // RINGMASTER_TRAINER_KERNELS_GEMM_TEST_UTIL_H_
