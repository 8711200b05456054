#include "trainer/kernels/cublas_gemm.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "trainer/cuda/cuda_status.h"

namespace ringmaster::kernels {
namespace {

cudaDataType_t DataType(ElementType type) {
  return type == ElementType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
}

cublasOperation_t Op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

bool FitsInt(int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

absl::Status Check(const RowMajorGemm& g) {
  if (!StridesValid(g) || !FitsInt(g.lda) || !FitsInt(g.ldb) || !FitsInt(g.ldc)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GEMM ", g.m, "x", g.n, "x", g.k, " with strides ", g.lda, ", ", g.ldb, ", ", g.ldc));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RowMajorGemmCuda(cublasHandle_t handle, ElementType type, const RowMajorGemm& g,
                              float alpha, const void* a, const void* b, float beta, void* c) {
  absl::Status valid = Check(g);
  if (!valid.ok()) return valid;
  if (g.m == 0 || g.n == 0) return absl::OkStatus();
  const ColumnMajorGemm cm = ToColumnMajor(g);
  const cudaDataType_t t = DataType(type);
  // cuBLAS's A is the row-major b, its B the row-major a.
  return trainer::CublasStatus(
      cublasGemmEx(handle, Op(cm.trans_a), Op(cm.trans_b), cm.m, cm.n, cm.k, &alpha, b, t,
                   static_cast<int>(cm.lda), a, t, static_cast<int>(cm.ldb), &beta, c, t,
                   static_cast<int>(cm.ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

absl::Status RowMajorBatchedGemmCuda(cublasHandle_t handle, ElementType type, const RowMajorGemm& g,
                                     float alpha, const void* a, int64_t stride_a, const void* b,
                                     int64_t stride_b, float beta, void* c, int64_t stride_c,
                                     int batch) {
  absl::Status valid = Check(g);
  if (!valid.ok()) return valid;
  if (g.m == 0 || g.n == 0 || batch == 0) return absl::OkStatus();
  const ColumnMajorGemm cm = ToColumnMajor(g);
  const cudaDataType_t t = DataType(type);
  return trainer::CublasStatus(
      cublasGemmStridedBatchedEx(
          handle, Op(cm.trans_a), Op(cm.trans_b), cm.m, cm.n, cm.k, &alpha, b, t,
          static_cast<int>(cm.lda), stride_b, a, t, static_cast<int>(cm.ldb), stride_a, &beta, c, t,
          static_cast<int>(cm.ldc), stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx");
}

}  // namespace ringmaster::kernels
