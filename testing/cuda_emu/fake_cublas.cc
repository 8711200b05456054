// The cuBLAS and cuBLASLt calls of the trainer (the set cublas_loader.cc forwards), computed on
// the CPU for the emulated configuration (--config=emu): column-major GEMMs as the cuBLAS
// documentation defines them (op(A) m x k, op(B) k x n, leading dimensions, strided batches),
// fp32 or bf16 storage with fp32 accumulation, and cuBLASLt's bias and GELU_AUX epilogues (the
// bias along D's rows; the pre-activation stored in the aux matrix; GELU's tanh form). The
// heuristic always has an algorithm. Naive loops: for tests of small shapes.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "testing/cuda_emu/fake_streams.h"

namespace {

float Read(const void* p, cudaDataType type, int64_t i) {
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

void Write(void* p, cudaDataType type, int64_t i, float v) {
  if (type == CUDA_R_16BF) {
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

bool Supported(cudaDataType type) { return type == CUDA_R_32F || type == CUDA_R_16BF; }

// Element (row, col) of op(X) for X stored column-major with leading dimension ld.
float Op(const void* x, cudaDataType type, int64_t ld, bool trans, int64_t row, int64_t col) {
  return trans ? Read(x, type, col + row * ld) : Read(x, type, row + col * ld);
}

float Gelu(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

struct Epilogue {
  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
};

// D = alpha op(A) op(B) + beta C (C read only when beta != 0), then the epilogue; C, D and aux
// share D's type. op(A)'s rows and op(B)'s columns are copied out as fp32 first, so that the
// inner products run over contiguous memory.
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
          cudaDataType at, int64_t lda, const void* b, cudaDataType bt, int64_t ldb, float beta,
          const void* c, int64_t ldc, void* d, cudaDataType dt, int64_t ldd, const Epilogue& e) {
  const bool bias = e.kind == CUBLASLT_EPILOGUE_BIAS || e.kind == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool gelu =
      e.kind == CUBLASLT_EPILOGUE_GELU_AUX || e.kind == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  std::vector<float> rows(m * k), cols(n * k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) rows[i * k + p] = Op(a, at, lda, ta, i, p);
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t p = 0; p < k; ++p) cols[j * k + p] = Op(b, bt, ldb, tb, p, j);
  }
  for (int64_t j = 0; j < n; ++j) {
    const float* col = cols.data() + j * k;
    for (int64_t i = 0; i < m; ++i) {
      const float* row = rows.data() + i * k;
      float acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += row[p] * col[p];
      float v = alpha * acc + (beta != 0 ? beta * Read(c, dt, i + j * ldc) : 0.0f);
      if (bias) v += Read(e.bias, dt, i);
      if (gelu) {
        Write(e.aux, dt, i + j * e.aux_ld, v);
        v = Gelu(v);
      }
      Write(d, dt, i + j * ldd, v);
    }
  }
}

struct Desc {
  bool trans_a = false, trans_b = false;
  Epilogue epilogue;
};
struct Layout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};

template <typename T>
T Value(const void* buf, size_t size) {
  T v{};
  std::memcpy(&v, buf, std::min(size, sizeof(T)));
  return v;
}

// A cuBLAS handle: the stream its GEMMs are ordered on.
struct Handle {
  cudaStream_t stream = nullptr;
};

// GEMMs run in stream order, deferred like kernels (fake_streams.h); the scalars are read when
// the GEMM is issued (host pointer mode), the matrices when it runs.
cublasStatus_t Issue(cudaStream_t stream, std::function<void()> gemm) {
  auto run = [gemm = std::move(gemm)] {
    gemm();
    return cudaSuccess;
  };
  return emu::Defer(stream, std::move(run), "a cuBLAS GEMM") == cudaSuccess
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasHandle_t>(new Handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete reinterpret_cast<Handle*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  reinterpret_cast<Handle*>(handle)->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusName(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_(emulated)";
}
const char* cublasGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "success" : "emulated cuBLAS refused the call";
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!Supported(Atype) || Atype != Btype || Atype != Ctype || computeType != CUBLAS_COMPUTE_32F) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  if (m < 0 || n < 0 || k < 0 || lda < (ta ? k : m) || ldb < (tb ? n : k) || ldc < m) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const size_t e = Ctype == CUDA_R_16BF ? 2 : 4;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  return Issue(reinterpret_cast<Handle*>(handle)->stream, [=] {
    for (int i = 0; i < batchCount; ++i) {
      Gemm(ta, tb, m, n, k, a, static_cast<const char*>(A) + i * strideA * e, Atype, lda,
           static_cast<const char*>(B) + i * strideB * e, Btype, ldb, b,
           static_cast<char*>(C) + i * strideC * e, ldc, static_cast<char*>(C) + i * strideC * e,
           Ctype, ldc, Epilogue{});
    }
  });
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B,
                                    Btype, ldb, 0, beta, C, Ctype, ldc, 0, 1, computeType, algo);
}

// cuBLASLt handles have no state here (each matmul names its stream).
cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasLtHandle_t>(new Handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete reinterpret_cast<Handle*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(new Desc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete reinterpret_cast<Desc*>(desc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  if (desc == nullptr || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Desc& d = *reinterpret_cast<Desc*>(desc);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      d.trans_a = Value<int32_t>(buf, size) != CUBLAS_OP_N;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      d.trans_b = Value<int32_t>(buf, size) != CUBLAS_OP_N;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      d.epilogue.kind = static_cast<cublasLtEpilogue_t>(Value<uint32_t>(buf, size));
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      d.epilogue.bias = Value<const void*>(buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      d.epilogue.aux = Value<void*>(buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      d.epilogue.aux_ld = Value<int64_t>(buf, size);
      return CUBLAS_STATUS_SUCCESS;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (!Supported(type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete reinterpret_cast<Layout*>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new char);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete reinterpret_cast<char*>(pref);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
                                                    cublasLtMatmulPreferenceAttributes_t,
                                                    const void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* count) {
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  std::memset(&results[0], 0, sizeof(results[0]));
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t computeDesc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                              const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                              const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t*, void*,
                              size_t, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (computeDesc == nullptr || Adesc == nullptr || Bdesc == nullptr || Cdesc == nullptr ||
      Ddesc == nullptr || alpha == nullptr || beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // Copies: the descriptors may be destroyed before the GEMM runs.
  const Desc d = *reinterpret_cast<const Desc*>(computeDesc);
  const Layout a = *reinterpret_cast<const Layout*>(Adesc);
  const Layout b = *reinterpret_cast<const Layout*>(Bdesc);
  const Layout c = *reinterpret_cast<const Layout*>(Cdesc);
  const Layout out = *reinterpret_cast<const Layout*>(Ddesc);
  const int64_t m = out.rows, n = out.cols;
  const int64_t k = d.trans_a ? a.rows : a.cols;
  const bool shapes = (d.trans_a ? a.cols : a.rows) == static_cast<uint64_t>(m) &&
                      (d.trans_b ? b.rows : b.cols) == static_cast<uint64_t>(n) &&
                      (d.trans_b ? b.cols : b.rows) == static_cast<uint64_t>(k) &&
                      c.rows == out.rows && c.cols == out.cols && c.type == out.type &&
                      a.ld >= static_cast<int64_t>(a.rows) &&
                      b.ld >= static_cast<int64_t>(b.rows) && out.ld >= m && c.ld == out.ld;
  const cublasLtEpilogue_t kind = d.epilogue.kind;
  const bool needs_bias = kind == CUBLASLT_EPILOGUE_BIAS || kind == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool needs_aux =
      kind == CUBLASLT_EPILOGUE_GELU_AUX || kind == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  if (kind != CUBLASLT_EPILOGUE_DEFAULT && !needs_bias && !needs_aux) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const bool epilogue_ok = (!needs_bias || d.epilogue.bias != nullptr) &&
                           (!needs_aux || (d.epilogue.aux != nullptr && d.epilogue.aux_ld >= m));
  if (!shapes || !epilogue_ok) return CUBLAS_STATUS_INVALID_VALUE;
  const float alpha_value = *static_cast<const float*>(alpha);
  const float beta_value = *static_cast<const float*>(beta);
  return Issue(stream, [=] {
    Gemm(d.trans_a, d.trans_b, m, n, k, alpha_value, A, a.type, a.ld, B, b.type, b.ld, beta_value,
         C, c.ld, D, out.type, out.ld, d.epilogue);
  });
}

}  // extern "C"
