#include "trainer/cuda/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <initializer_list>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/cuda_device_count.h"
#include "common/status.h"
#include "trainer/cuda/cuda_status.h"
#include "trainer/cuda/device_scratch.h"
#include "trainer/kernels/adamw_cuda.h"
#include "trainer/kernels/attention_cuda.h"
#include "trainer/kernels/cross_entropy_cuda.h"
#include "trainer/kernels/cublas_gemm.h"
#include "trainer/kernels/elementwise_cuda.h"
#include "trainer/kernels/embedding_cuda.h"
#include "trainer/kernels/gelu_cuda.h"
#include "trainer/kernels/layernorm_cuda.h"
#include "trainer/kernels/matmul_cuda.h"
#include "trainer/kernels/reduce_cuda.h"

namespace ringmaster::trainer {
namespace {

using bf16 = __nv_bfloat16;
using kernels::ElementType;

template <typename T>
T* Ptr(const Tensor& t) {
  return static_cast<T*>(t.data);
}

class CudaDeviceImpl final : public CudaDevice {
 public:
  CudaDeviceImpl(int index, CudaDeviceOptions options)
      : index_(index),
        options_(options),
        bf16_(options.compute_dtype == DType::kBF16),
        scratch_(index) {}
  ~CudaDeviceImpl() override;

  absl::Status Init();

  // ---- CudaDevice ----
  int index() const override { return index_; }
  cudaStream_t stream() const override { return stream_; }
  std::string description() const override { return description_; }
  int64_t allocated_bytes() const override { return allocated_.load(); }
  int64_t peak_allocated_bytes() const override { return peak_.load(); }
  std::string gemm_plans() const override {
    return kernels::FormatGemmPlanCounts(matmul_->plan_counts());
  }

  // ---- Device ----
  std::string name() const override { return absl::StrCat("cuda:", index_); }
  DType compute_dtype() const override { return options_.compute_dtype; }
  absl::StatusOr<DeviceBuffer> Allocate(int64_t size, DType dtype) override;
  absl::Status CopyToDevice(Tensor dst, const void* host) override;
  absl::Status CopyToHost(void* host, Tensor src) override;
  void Convert(Tensor dst, Tensor src) override;
  void Zero(Tensor t) override;
  void Scale(Tensor t, float factor) override;
  absl::StatusOr<double> SumSquares(absl::Span<const Tensor> tensors) override;
  absl::Status Synchronize() override;
  std::shared_ptr<const DeviceMark> Mark() override;
  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, Tensor a, int lda,
            Tensor b, int ldb, float beta, Tensor c, int ldc) override;
  void EmbeddingForward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int B, int T,
                        int C) override;
  void EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int B, int T,
                         int C) override;
  void LayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                        Tensor bias, int N, int C) override;
  void ResidualLayerNormForward(Tensor residual, Tensor out, Tensor mean, Tensor rstd, Tensor a,
                                Tensor b, Tensor weight, Tensor bias, int N, int C) override;
  void LayerNormBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                         Tensor weight, Tensor mean, Tensor rstd, int N, int C) override;
  void MatmulForward(Tensor out, Tensor gelu_out, Tensor inp, Tensor weight, Tensor bias, int N,
                     int IC, int OC) override;
  void MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                      Tensor weight, int N, int IC, int OC) override;
  void GeluBackward(Tensor dinp, Tensor pre, Tensor dout, int64_t n) override;
  void AttentionForward(Tensor out, Tensor att, Tensor qkv, int B, int T, int C, int NH) override;
  void AttentionBackward(Tensor dqkv, Tensor datt, Tensor dout, Tensor out, Tensor qkv, Tensor att,
                         int B, int T, int C, int NH) override;
  int64_t AttentionStateSize(int B, int T, int C, int NH) const override {
    return kernels::AttentionStateElements(AttentionImpl(C, NH), type(), B, T, NH);
  }
  const char* AttentionKind(int C, int NH) const override {
    return AttentionImpl(C, NH) == kernels::AttentionImpl::kFused ? "fused" : "materialized";
  }
  void Add(Tensor out, Tensor a, Tensor b, int64_t n) override;
  void CrossEntropy(Tensor logits, Tensor losses, Tensor targets, int N, int V, int Vp,
                    float dloss) override;
  void AdamW(const AdamWStep& step, Tensor master, Tensor working, Tensor grad, Tensor m,
             Tensor v) override;

 private:
  ElementType type() const { return bf16_ ? ElementType::kBF16 : ElementType::kF32; }
  kernels::AttentionImpl AttentionImpl(int C, int NH) const {
    return kernels::ChooseAttention(type(), C, NH, options_.fuse_attention);
  }
  // Records the first failure; later work is skipped (failed()).
  void Record(const absl::Status& s);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  absl::Status FirstError() const;
  // Records INVALID_ARGUMENT and returns false unless every non-empty tensor of `compute` has
  // the compute dtype, of `f32` kF32 and of `i32` kI32.
  bool CheckTypes(const char* op, std::initializer_list<Tensor> compute,
                  std::initializer_list<Tensor> f32 = {}, std::initializer_list<Tensor> i32 = {});
  // Waits for the compute stream; the first device error so far.
  absl::Status Wait(const char* what);

  const int index_;
  const CudaDeviceOptions options_;
  const bool bf16_;
  std::string description_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<kernels::MatmulCuda> matmul_;
  DeviceScratch scratch_;
  // SumSquares' per-tensor results on the device and their pinned host copy, sum_slots_ each.
  absl::Status EnsureSumSlots(size_t count);
  double* device_sums_ = nullptr;
  double* host_sums_ = nullptr;
  size_t sum_slots_ = 0;

  std::atomic<int64_t> allocated_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<bool> failed_{false};
  mutable absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

CudaDeviceImpl::~CudaDeviceImpl() {
  // Best effort at teardown: failures here leave nothing to recover.
  (void)cudaSetDevice(index_);
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  matmul_.reset();
  if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
  if (device_sums_ != nullptr) (void)cudaFree(device_sums_);
  if (host_sums_ != nullptr) (void)cudaFreeHost(host_sums_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

absl::Status CudaDeviceImpl::Init() {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(index_), "cudaSetDevice"));
  cudaDeviceProp prop{};
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, index_), "cudaGetDeviceProperties"));
  description_ = absl::StrFormat("%s, sm_%d%d, %.1f GiB", prop.name, prop.major, prop.minor,
                                 prop.totalGlobalMem / double{1 << 30});
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "compute stream"));
  RETURN_IF_ERROR(CublasStatus(cublasCreate(&cublas_), "cublasCreate"));
  RETURN_IF_ERROR(CublasStatus(cublasSetStream(cublas_, stream_), "cublasSetStream"));
  // fp32 GEMMs stay fp32 (no TF32), so that the fp32 mode compares closely with the CPU.
  RETURN_IF_ERROR(CublasStatus(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH), "math mode"));
  ASSIGN_OR_RETURN(
      matmul_, kernels::MatmulCuda::Create(index_, type(), stream_, options_.gemm_workspace_bytes));
  // A GPT's parameter tensors: 12 per layer and 4 more (grown on demand).
  return EnsureSumSlots(256);
}

void CudaDeviceImpl::Record(const absl::Status& s) {
  if (s.ok()) return;
  absl::MutexLock lock(&mu_);
  if (error_.ok()) error_ = Annotate(s, name());
  failed_.store(true, std::memory_order_release);
}

absl::Status CudaDeviceImpl::FirstError() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

bool CudaDeviceImpl::CheckTypes(const char* op, std::initializer_list<Tensor> compute,
                                std::initializer_list<Tensor> f32,
                                std::initializer_list<Tensor> i32) {
  auto check = [&](std::initializer_list<Tensor> tensors, DType want) {
    for (const Tensor& t : tensors) {
      if (!t.empty() && t.dtype != want) {
        Record(absl::InvalidArgumentError(absl::StrCat(
            op, ": a ", DTypeName(t.dtype), " tensor where ", DTypeName(want), " is required")));
        return false;
      }
    }
    return true;
  };
  return check(compute, options_.compute_dtype) && check(f32, DType::kF32) &&
         check(i32, DType::kI32);
}

absl::Status CudaDeviceImpl::Wait(const char* what) {
  Record(CudaStatus(cudaStreamSynchronize(stream_), what));
  return FirstError();
}

// ---- Memory ----

absl::StatusOr<DeviceBuffer> CudaDeviceImpl::Allocate(int64_t size, DType dtype) {
  if (size < 0) return absl::InvalidArgumentError(absl::StrCat("allocation of ", size));
  const size_t bytes = static_cast<size_t>(size) * DTypeSize(dtype);
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(index_), "cudaSetDevice"));
  void* p = nullptr;
  absl::Status s = CudaStatus(cudaMalloc(&p, std::max<size_t>(bytes, 256)),
                              absl::StrCat("allocating ", bytes, " bytes on ", name()));
  if (!s.ok()) return s;
  // Zero-filled in stream order: every user of the memory orders itself after stream_.
  s = CudaStatus(cudaMemsetAsync(p, 0, bytes, stream_), "zeroing an allocation");
  if (!s.ok()) {
    (void)cudaFree(p);  // the memset's error is the one reported
    return s;
  }
  const int64_t now = allocated_.fetch_add(static_cast<int64_t>(bytes)) + bytes;
  int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  const int index = index_;
  return DeviceBuffer(Tensor{p, size, dtype}, [this, index, bytes](void* q) {
    // cudaFree waits for work still using the memory. A failure here cannot be reported (a
    // destructor); it would also show in the next synchronisation.
    (void)cudaSetDevice(index);
    (void)cudaFree(q);
    allocated_.fetch_sub(static_cast<int64_t>(bytes));
  });
}

absl::Status CudaDeviceImpl::CopyToDevice(Tensor dst, const void* host) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(index_), "cudaSetDevice"));
  Record(CudaStatus(cudaMemcpyAsync(dst.data, host, dst.bytes(), cudaMemcpyHostToDevice, stream_),
                    "copy to device"));
  // The caller may reuse `host` once this returns.
  return Wait("copy to device");
}

absl::Status CudaDeviceImpl::CopyToHost(void* host, Tensor src) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(index_), "cudaSetDevice"));
  if (!failed()) {
    Record(CudaStatus(cudaMemcpyAsync(host, src.data, src.bytes(), cudaMemcpyDeviceToHost, stream_),
                      "copy to host"));
  }
  return Wait("copy to host");
}

void CudaDeviceImpl::Convert(Tensor dst, Tensor src) {
  if (failed()) return;
  if (dst.size != src.size) {
    Record(absl::InvalidArgumentError(
        absl::StrCat("convert of ", src.size, " elements into ", dst.size)));
    return;
  }
  if (dst.dtype == src.dtype) {
    if (dst.data != src.data) {
      Record(CudaStatus(
          cudaMemcpyAsync(dst.data, src.data, dst.bytes(), cudaMemcpyDeviceToDevice, stream_),
          "copy"));
    }
  } else if (dst.dtype == DType::kBF16 && src.dtype == DType::kF32) {
    Record(kernels::ConvertCuda(Ptr<bf16>(dst), Ptr<float>(src), dst.size, stream_));
  } else if (dst.dtype == DType::kF32 && src.dtype == DType::kBF16) {
    Record(kernels::ConvertCuda(Ptr<float>(dst), Ptr<bf16>(src), dst.size, stream_));
  } else {
    Record(absl::InvalidArgumentError(
        absl::StrCat("convert ", DTypeName(src.dtype), " to ", DTypeName(dst.dtype))));
  }
}

void CudaDeviceImpl::Zero(Tensor t) {
  if (failed()) return;
  Record(CudaStatus(cudaMemsetAsync(t.data, 0, t.bytes(), stream_), "zero"));
}

void CudaDeviceImpl::Scale(Tensor t, float factor) {
  if (failed()) return;
  if (t.dtype == DType::kBF16) {
    Record(kernels::ScaleCuda(Ptr<bf16>(t), factor, t.size, stream_));
  } else if (t.dtype == DType::kF32) {
    Record(kernels::ScaleCuda(Ptr<float>(t), factor, t.size, stream_));
  } else {
    Record(absl::InvalidArgumentError("scale of an i32 tensor"));
  }
}

absl::Status CudaDeviceImpl::EnsureSumSlots(size_t count) {
  if (count <= sum_slots_) return absl::OkStatus();
  // Only between read-backs (SumSquares waits for its copy), so nothing still uses the old ones.
  const size_t slots = std::max(count, 2 * sum_slots_);
  if (device_sums_ != nullptr) RETURN_IF_ERROR(CudaStatus(cudaFree(device_sums_), "cudaFree"));
  if (host_sums_ != nullptr) RETURN_IF_ERROR(CudaStatus(cudaFreeHost(host_sums_), "cudaFreeHost"));
  device_sums_ = nullptr;
  host_sums_ = nullptr;
  sum_slots_ = 0;
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&device_sums_, slots * sizeof(double)), "cudaMalloc"));
  RETURN_IF_ERROR(
      CudaStatus(cudaMallocHost(&host_sums_, slots * sizeof(double)), "cudaMallocHost"));
  sum_slots_ = slots;
  return absl::OkStatus();
}

absl::StatusOr<double> CudaDeviceImpl::SumSquares(absl::Span<const Tensor> tensors) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(index_), "cudaSetDevice"));
  if (tensors.empty()) return 0.0;
  Record(EnsureSumSlots(tensors.size()));
  // One result slot per tensor, all on the stream; one copy back and one wait for all of them.
  for (size_t i = 0; i < tensors.size() && !failed(); ++i) {
    const Tensor& t = tensors[i];
    if (t.dtype == DType::kBF16) {
      Record(kernels::SumSquaresCuda(Ptr<bf16>(t), t.size, device_sums_ + i, scratch_, stream_));
    } else if (t.dtype == DType::kF32) {
      Record(kernels::SumSquaresCuda(Ptr<float>(t), t.size, device_sums_ + i, scratch_, stream_));
    } else {
      Record(absl::InvalidArgumentError("sum of squares of an i32 tensor"));
    }
  }
  if (!failed()) {
    Record(CudaStatus(cudaMemcpyAsync(host_sums_, device_sums_, tensors.size() * sizeof(double),
                                      cudaMemcpyDeviceToHost, stream_),
                      "sum of squares read-back"));
  }
  RETURN_IF_ERROR(Wait("sum of squares"));
  double sum = 0;  // in tensor order: the same bits on every run
  for (size_t i = 0; i < tensors.size(); ++i) sum += host_sums_[i];
  return sum;
}

absl::Status CudaDeviceImpl::Synchronize() {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(index_), "cudaSetDevice"));
  return Wait("synchronize");
}

std::shared_ptr<const DeviceMark> CudaDeviceImpl::Mark() {
  // A failure here is not recorded as the device's: without a mark the communicator orders
  // itself after all the work issued when its operation starts, which is correct, only later.
  if (failed() || cudaSetDevice(index_) != cudaSuccess) return nullptr;
  cudaEvent_t event = nullptr;
  if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
    (void)cudaGetLastError();  // not this thread's next launch's error (kernel_utils.cuh)
    return nullptr;
  }
  if (cudaEventRecord(event, stream_) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaEventDestroy(event);
    return nullptr;
  }
  return std::make_shared<CudaDeviceMark>(event, index_);
}

// ---- GEMM ----

void CudaDeviceImpl::Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, Tensor a,
                          int lda, Tensor b, int ldb, float beta, Tensor c, int ldc) {
  if (failed() || !CheckTypes("gemm", {a, b, c})) return;
  const kernels::RowMajorGemm g{trans_a, trans_b, m, n, k, lda, ldb, ldc};
  Record(kernels::RowMajorGemmCuda(cublas_, type(), g, alpha, a.data, b.data, beta, c.data));
}

// ---- Fused operations ----

void CudaDeviceImpl::EmbeddingForward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int B,
                                      int T, int C) {
  if (failed() || !CheckTypes("embedding forward", {out, wte, wpe}, {}, {tokens})) return;
  Record(bf16_ ? kernels::EmbeddingForwardCuda(Ptr<bf16>(out), Ptr<int32_t>(tokens), Ptr<bf16>(wte),
                                               Ptr<bf16>(wpe), B, T, C, stream_)
               : kernels::EmbeddingForwardCuda(Ptr<float>(out), Ptr<int32_t>(tokens),
                                               Ptr<float>(wte), Ptr<float>(wpe), B, T, C, stream_));
}

void CudaDeviceImpl::EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int B,
                                       int T, int C) {
  if (failed() || !CheckTypes("embedding backward", {dwte, dwpe, dout}, {}, {tokens})) return;
  Record(bf16_
             ? kernels::EmbeddingBackwardCuda(Ptr<bf16>(dwte), Ptr<bf16>(dwpe), Ptr<bf16>(dout),
                                              Ptr<int32_t>(tokens), B, T, C, scratch_, stream_)
             : kernels::EmbeddingBackwardCuda(Ptr<float>(dwte), Ptr<float>(dwpe), Ptr<float>(dout),
                                              Ptr<int32_t>(tokens), B, T, C, scratch_, stream_));
}

void CudaDeviceImpl::LayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor inp,
                                      Tensor weight, Tensor bias, int N, int C) {
  if (failed() || !CheckTypes("layernorm", {out, inp, weight, bias}, {mean, rstd})) return;
  Record(bf16_ ? kernels::LayerNormForwardCuda(Ptr<bf16>(out), Ptr<float>(mean), Ptr<float>(rstd),
                                               Ptr<bf16>(inp), nullptr, nullptr, Ptr<bf16>(weight),
                                               Ptr<bf16>(bias), N, C, stream_)
               : kernels::LayerNormForwardCuda(
                     Ptr<float>(out), Ptr<float>(mean), Ptr<float>(rstd), Ptr<float>(inp), nullptr,
                     nullptr, Ptr<float>(weight), Ptr<float>(bias), N, C, stream_));
}

void CudaDeviceImpl::ResidualLayerNormForward(Tensor residual, Tensor out, Tensor mean, Tensor rstd,
                                              Tensor a, Tensor b, Tensor weight, Tensor bias, int N,
                                              int C) {
  if (failed() ||
      !CheckTypes("residual layernorm", {residual, out, a, b, weight, bias}, {mean, rstd})) {
    return;
  }
  Record(bf16_
             ? kernels::LayerNormForwardCuda(Ptr<bf16>(out), Ptr<float>(mean), Ptr<float>(rstd),
                                             Ptr<bf16>(a), Ptr<bf16>(b), Ptr<bf16>(residual),
                                             Ptr<bf16>(weight), Ptr<bf16>(bias), N, C, stream_)
             : kernels::LayerNormForwardCuda(Ptr<float>(out), Ptr<float>(mean), Ptr<float>(rstd),
                                             Ptr<float>(a), Ptr<float>(b), Ptr<float>(residual),
                                             Ptr<float>(weight), Ptr<float>(bias), N, C, stream_));
}

void CudaDeviceImpl::LayerNormBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                       Tensor inp, Tensor weight, Tensor mean, Tensor rstd, int N,
                                       int C) {
  if (failed() ||
      !CheckTypes("layernorm backward", {dinp, dweight, dbias, dout, inp, weight}, {mean, rstd})) {
    return;
  }
  Record(bf16_ ? kernels::LayerNormBackwardCuda(Ptr<bf16>(dinp), Ptr<bf16>(dweight),
                                                Ptr<bf16>(dbias), Ptr<bf16>(dout), Ptr<bf16>(inp),
                                                Ptr<bf16>(weight), Ptr<float>(mean),
                                                Ptr<float>(rstd), N, C, scratch_, stream_)
               : kernels::LayerNormBackwardCuda(
                     Ptr<float>(dinp), Ptr<float>(dweight), Ptr<float>(dbias), Ptr<float>(dout),
                     Ptr<float>(inp), Ptr<float>(weight), Ptr<float>(mean), Ptr<float>(rstd), N, C,
                     scratch_, stream_));
}

void CudaDeviceImpl::MatmulForward(Tensor out, Tensor gelu_out, Tensor inp, Tensor weight,
                                   Tensor bias, int N, int IC, int OC) {
  if (failed() || !CheckTypes("matmul", {out, gelu_out, inp, weight, bias})) return;
  const kernels::MatmulFusion fusion{options_.fuse_bias, options_.fuse_gelu};
  Record(
      matmul_->Forward(fusion, out.data, gelu_out.data, inp.data, weight.data, bias.data, N, IC, OC)
          .status());
}

void CudaDeviceImpl::MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                    Tensor inp, Tensor weight, int N, int IC, int OC) {
  if (failed() || !CheckTypes("matmul backward", {dinp, dweight, dbias, dout, inp, weight})) {
    return;
  }
  Record(matmul_->Backward(dinp.data, dweight.data, dbias.data, dout.data, inp.data, weight.data, N,
                           IC, OC));
}

void CudaDeviceImpl::GeluBackward(Tensor dinp, Tensor pre, Tensor dout, int64_t n) {
  if (failed() || !CheckTypes("gelu backward", {dinp, pre, dout})) return;
  Record(bf16_ ? kernels::GeluBackwardCuda(Ptr<bf16>(dinp), Ptr<bf16>(pre), Ptr<bf16>(dout), n,
                                           /*accumulate=*/false, stream_)
               : kernels::GeluBackwardCuda(Ptr<float>(dinp), Ptr<float>(pre), Ptr<float>(dout), n,
                                           /*accumulate=*/false, stream_));
}

void CudaDeviceImpl::AttentionForward(Tensor out, Tensor att, Tensor qkv, int B, int T, int C,
                                      int NH) {
  if (failed() || !CheckTypes("attention", {out, att, qkv})) return;
  Record(kernels::AttentionForwardCuda(AttentionImpl(C, NH), cublas_, type(), out.data, att.data,
                                       qkv.data, B, T, C, NH, stream_));
}

void CudaDeviceImpl::AttentionBackward(Tensor dqkv, Tensor datt, Tensor dout, Tensor out,
                                       Tensor qkv, Tensor att, int B, int T, int C, int NH) {
  if (failed() || !CheckTypes("attention backward", {dqkv, datt, dout, out, qkv, att})) return;
  Record(kernels::AttentionBackwardCuda(AttentionImpl(C, NH), cublas_, type(), dqkv.data, datt.data,
                                        dout.data, out.data, qkv.data, att.data, B, T, C, NH,
                                        stream_));
}

void CudaDeviceImpl::Add(Tensor out, Tensor a, Tensor b, int64_t n) {
  if (failed() || !CheckTypes("add", {out, a, b})) return;
  Record(bf16_ ? kernels::AddCuda(Ptr<bf16>(out), Ptr<bf16>(a), Ptr<bf16>(b), n, stream_)
               : kernels::AddCuda(Ptr<float>(out), Ptr<float>(a), Ptr<float>(b), n, stream_));
}

void CudaDeviceImpl::CrossEntropy(Tensor logits, Tensor losses, Tensor targets, int N, int V,
                                  int Vp, float dloss) {
  if (failed() || !CheckTypes("cross-entropy", {logits}, {losses}, {targets})) return;
  Record(bf16_ ? kernels::CrossEntropyCuda(Ptr<bf16>(logits), Ptr<float>(losses),
                                           Ptr<int32_t>(targets), N, V, Vp, dloss, stream_)
               : kernels::CrossEntropyCuda(Ptr<float>(logits), Ptr<float>(losses),
                                           Ptr<int32_t>(targets), N, V, Vp, dloss, stream_));
}

// ---- Optimizer ----

void CudaDeviceImpl::AdamW(const AdamWStep& s, Tensor master, Tensor working, Tensor grad, Tensor m,
                           Tensor v) {
  if (failed() || !CheckTypes("adamw", {working, grad}, {master, m, v})) return;
  if (grad.size != master.size || m.size != master.size || v.size != master.size ||
      (!working.empty() && working.size != master.size)) {
    Record(absl::InvalidArgumentError("adamw: tensors of different sizes"));
    return;
  }
  // fp32 training: the working weights are the master weights (the same memory).
  const bool separate = !working.empty() && working.data != master.data;
  Record(bf16_ ? kernels::AdamWCuda(Ptr<float>(master), separate ? Ptr<bf16>(working) : nullptr,
                                    Ptr<bf16>(grad), Ptr<float>(m), Ptr<float>(v), master.size, s,
                                    stream_)
               : kernels::AdamWCuda(Ptr<float>(master), separate ? Ptr<float>(working) : nullptr,
                                    Ptr<float>(grad), Ptr<float>(m), Ptr<float>(v), master.size, s,
                                    stream_));
}

}  // namespace

CudaDeviceMark::~CudaDeviceMark() {
  // Possibly on the communication thread, when it drops queued work it will not run: a thread
  // that has not selected the device would otherwise create a context on device 0.
  (void)cudaSetDevice(device_);
  (void)cudaEventDestroy(event_);  // released by CUDA once a pending record has completed
}

int VisibleCudaDevices() {
  const absl::StatusOr<int> count = CudaDeviceCount();
  return count.ok() ? *count : 0;
}

absl::StatusOr<std::unique_ptr<CudaDevice>> MakeCudaDevice(int device_index,
                                                           CudaDeviceOptions options) {
  if (options.compute_dtype != DType::kBF16 && options.compute_dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("the CUDA device computes in bf16 or f32, not ",
                                                   DTypeName(options.compute_dtype)));
  }
  const absl::StatusOr<int> visible = CudaDeviceCount();
  if (!visible.ok()) return absl::UnavailableError(visible.status().message());
  const int count = *visible;
  if (device_index < 0 || device_index >= count) {
    return absl::UnavailableError(
        absl::StrCat("CUDA device ", device_index, " requested, ", count, " visible"));
  }
  auto device = std::make_unique<CudaDeviceImpl>(device_index, options);
  RETURN_IF_ERROR(device->Init());
  return std::unique_ptr<CudaDevice>(std::move(device));
}

}  // namespace ringmaster::trainer
