// The cuBLAS and cuBLASLt functions the trainer calls, defined here and forwarded to the real
// libraries, which are opened on the first call rather than when the process starts.
//
// Why: linking libcublasLt made every trainer process, CPU ranks included, run its static
// initialisers at startup: about 0.2 s of CPU and 200 MiB of private memory each (52,000 page
// faults), which 8 CPU ranks restarting on 2 cores paid in every recovery. A process that never
// creates a cuBLAS handle now never loads the libraries.
//
// The libraries are looked up by soname (LD_LIBRARY_PATH, the binary's runpath, ld.so.cache),
// then in the toolkit's lib64 directory this build was configured with. When they cannot be
// loaded, every call returns CUBLAS_STATUS_NOT_INITIALIZED (what cuBLAS returns when it cannot
// initialise: no usable GPU or driver) and cublasGetStatusString names the loading error.
//
// Only the functions the trainer uses are here: a new cuBLAS call fails to link until it is
// added, which is the intended reminder.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

namespace {

struct Libraries {
  void* cublas = nullptr;
  void* cublas_lt = nullptr;
  std::string error;  // empty when both are open
};

void* Open(const std::string& soname, std::string* error) {
  void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) return handle;
  const std::string first = dlerror();
  handle =
      dlopen((std::string(RINGMASTER_CUDA_LIB_DIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr && error->empty()) {
    *error = "cannot load " + soname + ": " + first + "; " + dlerror();
  }
  return handle;
}

const Libraries& Load() {
  static const Libraries* const libraries = [] {
    auto* l = new Libraries;
    const std::string major = std::to_string(CUBLAS_VER_MAJOR);
    // cuBLASLt first: cuBLAS needs it.
    l->cublas_lt = Open("libcublasLt.so." + major, &l->error);
    l->cublas = Open("libcublas.so." + major, &l->error);
    return l;
  }();
  return *libraries;
}

template <typename Fn>
Fn Symbol(void* library, const char* name) {
  return library == nullptr ? nullptr : reinterpret_cast<Fn>(dlsym(library, name));
}

template <typename Fn>
Fn Cublas(const char* name) {
  return Symbol<Fn>(Load().cublas, name);
}

template <typename Fn>
Fn CublasLt(const char* name) {
  return Symbol<Fn>(Load().cublas_lt, name);
}

constexpr cublasStatus_t kNotLoaded = CUBLAS_STATUS_NOT_INITIALIZED;

}  // namespace

extern "C" {

// ---- cuBLAS

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  static const auto fn = Cublas<decltype(&cublasCreate_v2)>("cublasCreate_v2");
  return fn == nullptr ? kNotLoaded : fn(handle);
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  static const auto fn = Cublas<decltype(&cublasDestroy_v2)>("cublasDestroy_v2");
  return fn == nullptr ? kNotLoaded : fn(handle);
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  static const auto fn = Cublas<decltype(&cublasSetStream_v2)>("cublasSetStream_v2");
  return fn == nullptr ? kNotLoaded : fn(handle, stream);
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  static const auto fn = Cublas<decltype(&cublasSetMathMode)>("cublasSetMathMode");
  return fn == nullptr ? kNotLoaded : fn(handle, mode);
}

const char* cublasGetStatusName(cublasStatus_t status) {
  static const auto fn = Cublas<decltype(&cublasGetStatusName)>("cublasGetStatusName");
  return fn == nullptr ? "CUBLAS_STATUS_NOT_INITIALIZED" : fn(status);
}

const char* cublasGetStatusString(cublasStatus_t status) {
  static const auto fn = Cublas<decltype(&cublasGetStatusString)>("cublasGetStatusString");
  return fn == nullptr ? Load().error.c_str() : fn(status);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  // The header overloads cublasGemmEx in C++ (an inline variant), so the type is spelled out.
  using Fn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                const void*, const void*, cudaDataType, int, const void*,
                                cudaDataType, int, const void*, void*, cudaDataType, int,
                                cublasComputeType_t, cublasGemmAlgo_t);
  static const auto fn = Cublas<Fn>("cublasGemmEx");
  return fn == nullptr ? kNotLoaded
                       : fn(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb,
                            beta, C, Ctype, ldc, computeType, algo);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  using Fn = cublasStatus_t (*)(
      cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
      cudaDataType, int, long long int, const void*, cudaDataType, int, long long int, const void*,
      void*, cudaDataType, int, long long int, int, cublasComputeType_t, cublasGemmAlgo_t);
  static const auto fn = Cublas<Fn>("cublasGemmStridedBatchedEx");
  return fn == nullptr
             ? kNotLoaded
             : fn(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,
                  strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo);
}

// ---- cuBLASLt

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  static const auto fn = CublasLt<decltype(&cublasLtCreate)>("cublasLtCreate");
  return fn == nullptr ? kNotLoaded : fn(handle);
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  static const auto fn = CublasLt<decltype(&cublasLtDestroy)>("cublasLtDestroy");
  return fn == nullptr ? kNotLoaded : fn(handle);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  static const auto fn = CublasLt<decltype(&cublasLtMatmulDescCreate)>("cublasLtMatmulDescCreate");
  return fn == nullptr ? kNotLoaded : fn(desc, computeType, scaleType);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  static const auto fn =
      CublasLt<decltype(&cublasLtMatmulDescDestroy)>("cublasLtMatmulDescDestroy");
  return fn == nullptr ? kNotLoaded : fn(desc);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t sizeInBytes) {
  static const auto fn =
      CublasLt<decltype(&cublasLtMatmulDescSetAttribute)>("cublasLtMatmulDescSetAttribute");
  return fn == nullptr ? kNotLoaded : fn(desc, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  static const auto fn =
      CublasLt<decltype(&cublasLtMatrixLayoutCreate)>("cublasLtMatrixLayoutCreate");
  return fn == nullptr ? kNotLoaded : fn(layout, type, rows, cols, ld);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  static const auto fn =
      CublasLt<decltype(&cublasLtMatrixLayoutDestroy)>("cublasLtMatrixLayoutDestroy");
  return fn == nullptr ? kNotLoaded : fn(layout);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  static const auto fn =
      CublasLt<decltype(&cublasLtMatmulPreferenceCreate)>("cublasLtMatmulPreferenceCreate");
  return fn == nullptr ? kNotLoaded : fn(pref);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  static const auto fn =
      CublasLt<decltype(&cublasLtMatmulPreferenceDestroy)>("cublasLtMatmulPreferenceDestroy");
  return fn == nullptr ? kNotLoaded : fn(pref);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t sizeInBytes) {
  static const auto fn = CublasLt<decltype(&cublasLtMatmulPreferenceSetAttribute)>(
      "cublasLtMatmulPreferenceSetAttribute");
  return fn == nullptr ? kNotLoaded : fn(pref, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
  static const auto fn =
      CublasLt<decltype(&cublasLtMatmulAlgoGetHeuristic)>("cublasLtMatmulAlgoGetHeuristic");
  return fn == nullptr ? kNotLoaded
                       : fn(handle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference,
                            requestedAlgoCount, heuristicResultsArray, returnAlgoCount);
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t computeDesc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                              const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                              const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  static const auto fn = CublasLt<decltype(&cublasLtMatmul)>("cublasLtMatmul");
  return fn == nullptr ? kNotLoaded
                       : fn(handle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D,
                            Ddesc, algo, workspace, workspaceSizeInBytes, stream);
}

}  // extern "C"
