// Dense layers on the GPU (matmul.h's operations): matmul_schedule.h's steps with cuBLASLt GEMMs
// (fp32 accumulation; the bias and GELU fused into cuBLASLt's epilogue where it offers an
// algorithm for them, otherwise the kernels of elementwise.cu and gelu.cu), and deterministic
// bias gradients (reduce.cu's column sums).
//
// cuBLASLt descriptors, layouts and the heuristic's algorithm are created once per shape,
// epilogue and operand alignment and cached. A GEMM without an epilogue for which cuBLASLt
// offers no algorithm (odd shapes or alignments) runs through cuBLAS instead. One element type per
// object (the device's compute type); work is enqueued on the stream given at creation. Not
// thread-safe: one thread issues the operations (the Device contract). The object must be destroyed
// on a live CUDA context.
#ifndef RINGMASTER_TRAINER_KERNELS_MATMUL_CUDA_H_
#define RINGMASTER_TRAINER_KERNELS_MATMUL_CUDA_H_

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <tuple>

#include "absl/status/statusor.h"
#include "trainer/cuda/device_scratch.h"
#include "trainer/kernels/gemm_plan.h"
#include "trainer/kernels/matmul_schedule.h"

namespace ringmaster::kernels {

class MatmulCuda final : public MatmulSteps {
 public:
  // A cuBLASLt handle and `workspace_bytes` of workspace on CUDA device `device`.
  static absl::StatusOr<std::unique_ptr<MatmulCuda>> Create(int device, ElementType type,
                                                            cudaStream_t stream,
                                                            size_t workspace_bytes = 32 << 20);
  ~MatmulCuda() override;

  // out = inp weight^T (+ bias) (, gelu_out = GELU(out)); see matmul_schedule.h. Returns the
  // epilogue plan that ran.
  absl::StatusOr<EpiloguePlan> Forward(MatmulFusion fusion, void* out, void* gelu_out,
                                       const void* inp, const void* weight, const void* bias, int N,
                                       int IC, int OC) {
    return RunMatmulForward(*this, fusion, out, gelu_out, inp, weight, bias, N, IC, OC);
  }
  // dinp = dout weight (overwrites; skipped when null); dweight += dout^T inp; dbias += column
  // sums of dout (skipped when null).
  absl::Status Backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                        const void* weight, int N, int IC, int OC) {
    return RunMatmulBackward(*this, dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
  }
  // Cached plans (for tests and diagnostics).
  size_t cached_plans() const { return plans_.size(); }
  GemmPlanCounts plan_counts() const {
    GemmPlanCounts counts;
    for (const auto& [key, plan] : plans_) {
      (plan.supported ? counts.with_algorithm
                      : counts.without_algorithm)[static_cast<int>(key.epilogue)]++;
    }
    return counts;
  }

  // MatmulSteps.
  absl::StatusOr<bool> Gemm(const RowMajorGemm& g, float alpha, const void* a, const void* b,
                            float beta, void* c, Epilogue epilogue, const void* bias,
                            void* aux) override;
  absl::Status AddBias(void* out, const void* bias, int rows, int cols) override;
  absl::Status Gelu(void* out, const void* in, int64_t n) override;
  absl::Status ColumnSums(void* out, const void* in, int rows, int cols, bool accumulate) override;

 private:
  struct PlanKey {
    ColumnMajorGemm g;
    Epilogue epilogue;
    int align_a, align_b, align_c, align_bias, align_aux;
    auto Tie() const {
      return std::tie(g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, epilogue, align_a,
                      align_b, align_c, align_bias, align_aux);
    }
    bool operator<(const PlanKey& o) const { return Tie() < o.Tie(); }
  };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool supported = false;
  };

  MatmulCuda(int device, ElementType type, cudaStream_t stream)
      : device_(device), type_(type), stream_(stream), scratch_(device) {}
  // The cached plan for `key`, made on first use (`bias` and `aux` are the pointers the
  // heuristic sees).
  absl::StatusOr<Plan*> GetPlan(const PlanKey& key, const void* bias, void* aux);
  // Creates the descriptor and layouts and asks the heuristic; on error the caller destroys
  // what was created.
  absl::Status MakePlan(const PlanKey& key, const void* bias, void* aux, Plan* plan);

  const int device_;
  const ElementType type_;
  const cudaStream_t stream_;
  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t cublas_ = nullptr;  // the fallback for plain GEMMs
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  trainer::DeviceScratch scratch_;
  std::map<PlanKey, Plan> plans_;
};

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_MATMUL_CUDA_H_
