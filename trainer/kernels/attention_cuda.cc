#include "trainer/kernels/attention_cuda.h"

#include <cuda_bf16.h>

#include "trainer/cuda/cuda_status.h"
#include "trainer/kernels/attention_launch.h"
#include "trainer/kernels/attention_schedule.h"
#include "trainer/kernels/cublas_gemm.h"
#include "trainer/kernels/flash_attention_launch.h"

namespace ringmaster::kernels {
namespace {

using trainer::CudaStatus;

class CudaAttentionSteps final : public AttentionSteps {
 public:
  CudaAttentionSteps(cublasHandle_t cublas, ElementType type, cudaStream_t stream)
      : cublas_(cublas), type_(type), stream_(stream) {}

  absl::Status BatchedGemm(const RowMajorGemm& g, float alpha, const void* a, int64_t stride_a,
                           const void* b, int64_t stride_b, float beta, void* c, int64_t stride_c,
                           int batch) override {
    return RowMajorBatchedGemmCuda(cublas_, type_, g, alpha, a, stride_a, b, stride_b, beta, c,
                                   stride_c, batch);
  }
  absl::Status CausalSoftmax(void* att, int64_t rows, int T) override {
    const cudaError_t err =
        type_ == ElementType::kBF16
            ? LaunchCausalSoftmax(static_cast<__nv_bfloat16*>(att), rows, T, stream_)
            : LaunchCausalSoftmax(static_cast<float*>(att), rows, T, stream_);
    return CudaStatus(err, "attention softmax");
  }
  absl::Status CausalSoftmaxBackward(void* datt, const void* att, int64_t rows, int T) override {
    const cudaError_t err =
        type_ == ElementType::kBF16
            ? LaunchCausalSoftmaxBackward(static_cast<__nv_bfloat16*>(datt),
                                          static_cast<const __nv_bfloat16*>(att), rows, T, stream_)
            : LaunchCausalSoftmaxBackward(static_cast<float*>(datt), static_cast<const float*>(att),
                                          rows, T, stream_);
    return CudaStatus(err, "attention softmax backward");
  }

 private:
  cublasHandle_t cublas_;
  ElementType type_;
  cudaStream_t stream_;
};

using bf16 = __nv_bfloat16;

absl::Status CheckFused(ElementType type, int C, int NH) {
  if (ChooseAttention(type, C, NH, true) == AttentionImpl::kFused) return absl::OkStatus();
  return absl::InvalidArgumentError("fused attention needs bf16 and a head size of 32 or 64");
}

}  // namespace

AttentionImpl ChooseAttention(ElementType type, int C, int NH, bool allow_fused) {
  return allow_fused && type == ElementType::kBF16 && FlashAttentionSupports(C, NH)
             ? AttentionImpl::kFused
             : AttentionImpl::kMaterialized;
}

int64_t AttentionStateElements(AttentionImpl impl, ElementType type, int B, int T, int NH) {
  const int64_t rows = int64_t{B} * NH * T;
  if (impl == AttentionImpl::kMaterialized) return rows * T;
  const int64_t bytes = (rows * 4 + 15) / 16 * 16;
  return bytes / ElementBytes(type);
}

absl::Status AttentionForwardCuda(AttentionImpl impl, cublasHandle_t cublas, ElementType type,
                                  void* out, void* att, const void* qkv, int B, int T, int C,
                                  int NH, cudaStream_t stream) {
  if (impl == AttentionImpl::kFused) {
    absl::Status s = CheckFused(type, C, NH);
    if (!s.ok()) return s;
    return CudaStatus(
        LaunchFlashAttentionForward(static_cast<bf16*>(out), static_cast<float*>(att),
                                    static_cast<const bf16*>(qkv), B, T, C, NH, stream),
        "fused attention");
  }
  absl::Status s = trainer::CublasStatus(cublasSetStream(cublas, stream), "cublasSetStream");
  if (!s.ok()) return s;
  CudaAttentionSteps steps(cublas, type, stream);
  return RunAttentionForward(steps, ElementBytes(type), out, att, qkv, B, T, C, NH);
}

absl::Status AttentionBackwardCuda(AttentionImpl impl, cublasHandle_t cublas, ElementType type,
                                   void* dqkv, void* datt, const void* dout, const void* out,
                                   const void* qkv, const void* att, int B, int T, int C, int NH,
                                   cudaStream_t stream) {
  if (impl == AttentionImpl::kFused) {
    absl::Status s = CheckFused(type, C, NH);
    if (!s.ok()) return s;
    return CudaStatus(
        LaunchFlashAttentionBackward(static_cast<bf16*>(dqkv), static_cast<float*>(datt),
                                     static_cast<const bf16*>(dout), static_cast<const bf16*>(out),
                                     static_cast<const bf16*>(qkv), static_cast<const float*>(att),
                                     B, T, C, NH, stream),
        "fused attention backward");
  }
  absl::Status s = trainer::CublasStatus(cublasSetStream(cublas, stream), "cublasSetStream");
  if (!s.ok()) return s;
  CudaAttentionSteps steps(cublas, type, stream);
  return RunAttentionBackward(steps, ElementBytes(type), dqkv, datt, dout, qkv, att, B, T, C, NH);
}

}  // namespace ringmaster::kernels
