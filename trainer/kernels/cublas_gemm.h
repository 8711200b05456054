// Row-major GEMMs through cuBLAS (gemm_plan.h maps them to cuBLAS's column-major convention):
// fp32 or bf16 matrices, fp32 accumulation and fp32 alpha/beta, no TF32 (fp32 stays fp32).
// Work is enqueued on the handle's stream; errors as cuda_status.h (INVALID_ARGUMENT for
// strides that do not cover their matrices or dimensions beyond cuBLAS's int range).
#ifndef RINGMASTER_TRAINER_KERNELS_CUBLAS_GEMM_H_
#define RINGMASTER_TRAINER_KERNELS_CUBLAS_GEMM_H_

#include <cublas_v2.h>

#include <cstdint>

#include "absl/status/status.h"
#include "trainer/kernels/gemm_plan.h"

namespace ringmaster::kernels {

// c = alpha op(a) op(b) + beta c.
absl::Status RowMajorGemmCuda(cublasHandle_t handle, ElementType type, const RowMajorGemm& g,
                              float alpha, const void* a, const void* b, float beta, void* c);

// For i < batch: c_i = alpha op(a_i) op(b_i) + beta c_i, x_i = x + i * stride_x elements.
absl::Status RowMajorBatchedGemmCuda(cublasHandle_t handle, ElementType type, const RowMajorGemm& g,
                                     float alpha, const void* a, int64_t stride_a, const void* b,
                                     int64_t stride_b, float beta, void* c, int64_t stride_c,
                                     int batch);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_CUBLAS_GEMM_H_
