#include "trainer/kernels/matmul_cuda.h"

#include <cuda_bf16.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "trainer/cuda/cuda_status.h"
#include "trainer/kernels/cublas_gemm.h"
#include "trainer/kernels/elementwise_cuda.h"
#include "trainer/kernels/gelu_cuda.h"
#include "trainer/kernels/reduce_cuda.h"

namespace ringmaster::kernels {
namespace {

using trainer::CublasStatus;
using trainer::CudaStatus;

cudaDataType_t DataType(ElementType type) {
  return type == ElementType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
}

cublasLtEpilogue_t LtEpilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kNone:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kGeluAux:
      return CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::kGeluAuxBias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

template <typename V>
absl::Status SetDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                     const V& value) {
  return CublasStatus(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)),
                      "cublasLtMatmulDescSetAttribute");
}

template <typename V>
absl::Status SetPref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                     const V& value) {
  return CublasStatus(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)),
                      "cublasLtMatmulPreferenceSetAttribute");
}

absl::Status Layout(cublasLtMatrixLayout_t* layout, cudaDataType_t type, const StoredMatrix& m) {
  return CublasStatus(cublasLtMatrixLayoutCreate(layout, type, static_cast<uint64_t>(m.rows),
                                                 static_cast<uint64_t>(m.cols), m.ld),
                      "cublasLtMatrixLayoutCreate");
}

void DestroyPlanObjects(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                        cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c) {
  // Best effort: failures here leave nothing to recover.
  if (a != nullptr) (void)cublasLtMatrixLayoutDestroy(a);
  if (b != nullptr) (void)cublasLtMatrixLayoutDestroy(b);
  if (c != nullptr) (void)cublasLtMatrixLayoutDestroy(c);
  if (desc != nullptr) (void)cublasLtMatmulDescDestroy(desc);
}

bool HasBias(Epilogue e) { return e == Epilogue::kBias || e == Epilogue::kGeluAuxBias; }
bool HasGelu(Epilogue e) { return e == Epilogue::kGeluAux || e == Epilogue::kGeluAuxBias; }

}  // namespace

absl::StatusOr<std::unique_ptr<MatmulCuda>> MatmulCuda::Create(int device, ElementType type,
                                                               cudaStream_t stream,
                                                               size_t workspace_bytes) {
  std::unique_ptr<MatmulCuda> m(new MatmulCuda(device, type, stream));
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  RETURN_IF_ERROR(CublasStatus(cublasLtCreate(&m->lt_), "cublasLtCreate"));
  RETURN_IF_ERROR(CublasStatus(cublasCreate(&m->cublas_), "cublasCreate"));
  RETURN_IF_ERROR(CublasStatus(cublasSetStream(m->cublas_, stream), "cublasSetStream"));
  if (workspace_bytes > 0) {
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&m->workspace_, workspace_bytes), "cuBLASLt workspace"));
  }
  m->workspace_bytes_ = workspace_bytes;
  return m;
}

MatmulCuda::~MatmulCuda() {
  // Best effort at teardown: failures here leave nothing to recover.
  (void)cudaSetDevice(device_);
  (void)cudaStreamSynchronize(stream_);
  for (auto& [key, plan] : plans_) DestroyPlanObjects(plan.desc, plan.a, plan.b, plan.c);
  if (workspace_ != nullptr) (void)cudaFree(workspace_);
  if (lt_ != nullptr) (void)cublasLtDestroy(lt_);
  if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
}

absl::StatusOr<MatmulCuda::Plan*> MatmulCuda::GetPlan(const PlanKey& key, const void* bias,
                                                      void* aux) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return &it->second;
  Plan plan;
  absl::Status made = MakePlan(key, bias, aux, &plan);
  if (!made.ok()) {
    DestroyPlanObjects(plan.desc, plan.a, plan.b, plan.c);
    return made;
  }
  return &plans_.emplace(key, plan).first->second;
}

absl::Status MatmulCuda::MakePlan(const PlanKey& key, const void* bias, void* aux, Plan* out) {
  Plan& plan = *out;
  const ColumnMajorGemm& g = key.g;
  const cudaDataType_t type = DataType(type_);
  RETURN_IF_ERROR(CublasStatus(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                               "cublasLtMatmulDescCreate"));
  const int32_t transa = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t transb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  RETURN_IF_ERROR(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, transa));
  RETURN_IF_ERROR(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, transb));
  const uint32_t epilogue = LtEpilogue(key.epilogue);
  RETURN_IF_ERROR(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue));
  // The heuristic reads the epilogue pointers' alignment, so they are set before it runs (and
  // again before every call).
  if (HasBias(key.epilogue)) {
    RETURN_IF_ERROR(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias));
  }
  if (HasGelu(key.epilogue)) {
    RETURN_IF_ERROR(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux));
    const int64_t aux_ld = g.ldc;
    RETURN_IF_ERROR(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld));
  }
  RETURN_IF_ERROR(Layout(&plan.a, type, StoredA(g)));
  RETURN_IF_ERROR(Layout(&plan.b, type, StoredB(g)));
  RETURN_IF_ERROR(Layout(&plan.c, type, StoredC(g)));

  cublasLtMatmulPreference_t pref = nullptr;
  RETURN_IF_ERROR(
      CublasStatus(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"));
  absl::Status s = [&]() -> absl::Status {
    const uint64_t workspace = workspace_bytes_;
    RETURN_IF_ERROR(SetPref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace));
    const uint32_t a = key.align_a, b = key.align_b, c = key.align_c;
    RETURN_IF_ERROR(SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, a));
    RETURN_IF_ERROR(SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, b));
    RETURN_IF_ERROR(SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c));
    RETURN_IF_ERROR(SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, c));
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t h = cublasLtMatmulAlgoGetHeuristic(lt_, plan.desc, plan.a, plan.b, plan.c,
                                                            plan.c, pref, 1, &result, &count);
    if (h != CUBLAS_STATUS_SUCCESS || count == 0) {
      // No cuBLASLt algorithm for this combination (NOT_SUPPORTED, or INVALID_VALUE for an
      // epilogue, type and layout it rejects): the schedule falls back to a plan with less fused,
      // and an unfused GEMM to plain cuBLAS.
      if (h != CUBLAS_STATUS_SUCCESS && h != CUBLAS_STATUS_NOT_SUPPORTED) {
        RM_LOG(WARNING) << "cuBLASLt has no algorithm for a " << g.m << "x" << g.n << "x" << g.k
                        << " GEMM with epilogue " << EpilogueName(key.epilogue) << " ("
                        << CublasStatus(h, "cublasLtMatmulAlgoGetHeuristic")
                        << "): using less fusion";
      }
      plan.supported = false;
      return absl::OkStatus();
    }
    plan.algo = result.algo;
    plan.supported = true;
    return absl::OkStatus();
  }();
  (void)cublasLtMatmulPreferenceDestroy(pref);  // nothing to recover if this fails
  return s;
}

absl::StatusOr<bool> MatmulCuda::Gemm(const RowMajorGemm& g, float alpha, const void* a,
                                      const void* b, float beta, void* c, Epilogue epilogue,
                                      const void* bias, void* aux) {
  if (!StridesValid(g)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GEMM ", g.m, "x", g.n, "x", g.k, " with invalid strides"));
  }
  if (HasBias(epilogue) != (bias != nullptr) || HasGelu(epilogue) != (aux != nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("epilogue ", EpilogueName(epilogue), " with mismatched operands"));
  }
  if (g.m == 0 || g.n == 0) return true;
  PlanKey key;
  key.g = ToColumnMajor(g);
  key.epilogue = epilogue;
  // cuBLASLt's A is the row-major b, its B the row-major a.
  key.align_a = PointerAlignment(b);
  key.align_b = PointerAlignment(a);
  key.align_c = PointerAlignment(c);
  key.align_bias = PointerAlignment(bias);
  key.align_aux = PointerAlignment(aux);
  ASSIGN_OR_RETURN(Plan * plan, GetPlan(key, bias, aux));
  if (!plan->supported) {
    if (epilogue != Epilogue::kNone) return false;  // the schedule tries less fusion
    RETURN_IF_ERROR(RowMajorGemmCuda(cublas_, type_, g, alpha, a, b, beta, c));
    return true;
  }
  if (HasBias(epilogue)) {
    RETURN_IF_ERROR(SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias));
  }
  if (HasGelu(epilogue)) {
    RETURN_IF_ERROR(SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux));
  }
  const cublasStatus_t run =
      cublasLtMatmul(lt_, plan->desc, &alpha, b, plan->a, a, plan->b, &beta, c, plan->c, c, plan->c,
                     &plan->algo, workspace_, workspace_bytes_, stream_);
  if (run == CUBLAS_STATUS_NOT_SUPPORTED) {
    // Refused before anything was computed: from now on this shape takes the unfused path.
    plan->supported = false;
    return Gemm(g, alpha, a, b, beta, c, epilogue, bias, aux);
  }
  RETURN_IF_ERROR(CublasStatus(
      run, absl::StrCat("cublasLtMatmul ", g.m, "x", g.n, "x", g.k, " ", EpilogueName(epilogue))));
  return true;
}

absl::Status MatmulCuda::AddBias(void* out, const void* bias, int rows, int cols) {
  if (type_ == ElementType::kBF16) {
    return AddBiasCuda(static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(bias),
                       rows, cols, stream_);
  }
  return AddBiasCuda(static_cast<float*>(out), static_cast<const float*>(bias), rows, cols,
                     stream_);
}

absl::Status MatmulCuda::Gelu(void* out, const void* in, int64_t n) {
  if (type_ == ElementType::kBF16) {
    return GeluForwardCuda(static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(in),
                           n, stream_);
  }
  return GeluForwardCuda(static_cast<float*>(out), static_cast<const float*>(in), n, stream_);
}

absl::Status MatmulCuda::ColumnSums(void* out, const void* in, int rows, int cols,
                                    bool accumulate) {
  if (type_ == ElementType::kBF16) {
    return ColumnSumsCuda(static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(in),
                          rows, cols, accumulate, scratch_, stream_);
  }
  return ColumnSumsCuda(static_cast<float*>(out), static_cast<const float*>(in), rows, cols,
                        accumulate, scratch_, stream_);
}

}  // namespace ringmaster::kernels
