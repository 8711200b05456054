#include "trainer/model/cpu_device.h"

#include <cblas.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "trainer/kernels/adamw.h"
#include "trainer/kernels/attention.h"
#include "trainer/kernels/cross_entropy.h"
#include "trainer/kernels/embedding.h"
#include "trainer/kernels/gelu.h"
#include "trainer/kernels/layernorm.h"
#include "trainer/kernels/matmul.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace ringmaster::trainer {
namespace {

constexpr size_t kAlignment = 64;

float* F(const Tensor& t) { return t.empty() ? nullptr : t.f32(); }

// Sum of squares in eight independent double lanes (a fixed order, so deterministic), which the
// compiler vectorises; one scalar chain would be latency-bound.
__attribute__((target_clones("avx512f", "avx2", "default"))) double SumSquaresF32(const float* p,
                                                                                   int64_t n) {
  double lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) lanes[k] += static_cast<double>(p[i + k]) * p[i + k];
  }
  for (; i < n; ++i) lanes[i % 8] += static_cast<double>(p[i]) * p[i];
  double sum = 0;
  for (double l : lanes) sum += l;
  return sum;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void AddF32(float* o, const float* x,
                                                                         const float* y,
                                                                         int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

class CpuDevice final : public Device {
 public:
  std::string name() const override { return "cpu"; }
  DType compute_dtype() const override { return DType::kF32; }

  absl::StatusOr<DeviceBuffer> Allocate(int64_t size, DType dtype) override {
    if (dtype == DType::kBF16) return absl::InvalidArgumentError("the CPU device has no bf16");
    const size_t bytes = static_cast<size_t>(size) * DTypeSize(dtype);
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
    }
    std::memset(p, 0, rounded == 0 ? kAlignment : rounded);
    return DeviceBuffer(Tensor{p, size, dtype}, [](void* q) { std::free(q); });
  }
  absl::Status CopyToDevice(Tensor dst, const void* host) override {
    std::memcpy(dst.data, host, dst.bytes());
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* host, Tensor src) override {
    std::memcpy(host, src.data, src.bytes());
    return absl::OkStatus();
  }
  void Convert(Tensor dst, Tensor src) override {
    RM_CHECK(dst.dtype == src.dtype && dst.size == src.size) << "CPU Convert is a copy";
    if (dst.data != src.data) std::memcpy(dst.data, src.data, dst.bytes());
  }
  void Zero(Tensor t) override { std::memset(t.data, 0, t.bytes()); }
  void Scale(Tensor t, float factor) override {
    float* p = t.f32();
    for (int64_t i = 0; i < t.size; ++i) p[i] *= factor;
  }
  absl::StatusOr<double> SumSquares(absl::Span<const Tensor> tensors) override {
    double sum = 0;
    for (const Tensor& t : tensors) sum += SumSquaresF32(t.f32(), t.size);
    return sum;
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, Tensor a, int lda,
            Tensor b, int ldb, float beta, Tensor c, int ldc) override {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a.f32(), lda, b.f32(), ldb,
                beta, c.f32(), ldc);
  }

  void EmbeddingForward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int B, int T,
                        int C) override {
    kernels::EmbeddingForwardCpu(out.f32(), tokens.i32(), wte.f32(), wpe.f32(), B, T, C);
  }
  void EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int B, int T,
                         int C) override {
    kernels::EmbeddingBackwardCpu(F(dwte), F(dwpe), dout.f32(), tokens.i32(), B, T, C);
  }
  void LayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                        Tensor bias, int N, int C) override {
    kernels::LayerNormForwardCpu(out.f32(), mean.f32(), rstd.f32(), inp.f32(), nullptr, nullptr,
                                 weight.f32(), bias.f32(), N, C);
  }
  void ResidualLayerNormForward(Tensor residual, Tensor out, Tensor mean, Tensor rstd, Tensor a,
                                Tensor b, Tensor weight, Tensor bias, int N, int C) override {
    kernels::LayerNormForwardCpu(out.f32(), mean.f32(), rstd.f32(), a.f32(), b.f32(),
                                 residual.f32(), weight.f32(), bias.f32(), N, C);
  }
  void LayerNormBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                         Tensor weight, Tensor mean, Tensor rstd, int N, int C) override {
    kernels::LayerNormBackwardCpu(dinp.f32(), dweight.f32(), F(dbias), dout.f32(), inp.f32(),
                                  weight.f32(), mean.f32(), rstd.f32(), N, C);
  }
  void MatmulForward(Tensor out, Tensor gelu_out, Tensor inp, Tensor weight, Tensor bias, int N,
                     int IC, int OC) override {
    kernels::MatmulForwardCpu(out.f32(), F(gelu_out), inp.f32(), weight.f32(), F(bias), N, IC,
                              OC);
  }
  void MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                      Tensor weight, int N, int IC, int OC) override {
    kernels::MatmulBackwardCpu(F(dinp), dweight.f32(), F(dbias), dout.f32(), inp.f32(),
                               weight.f32(), N, IC, OC);
  }
  void GeluBackward(Tensor dinp, Tensor pre, Tensor dout, int64_t n) override {
    kernels::GeluBackwardCpu(dinp.f32(), pre.f32(), dout.f32(), n, /*accumulate=*/false);
  }
  void AttentionForward(Tensor out, Tensor att, Tensor qkv, int B, int T, int C,
                        int NH) override {
    kernels::AttentionForwardCpu(out.f32(), att.f32(), qkv.f32(), B, T, C, NH);
  }
  void AttentionBackward(Tensor dqkv, Tensor datt, Tensor dout, Tensor /*out*/, Tensor qkv,
                         Tensor att, int B, int T, int C, int NH) override {
    kernels::AttentionBackwardCpu(dqkv.f32(), datt.f32(), dout.f32(), qkv.f32(), att.f32(), B, T,
                                  C, NH);
  }
  int64_t AttentionStateSize(int B, int T, int /*C*/, int NH) const override {
    return int64_t{B} * NH * T * T;
  }
  const char* AttentionKind(int /*C*/, int /*NH*/) const override { return "materialized"; }
  void Add(Tensor out, Tensor a, Tensor b, int64_t n) override {
    AddF32(out.f32(), a.f32(), b.f32(), n);
  }
  void CrossEntropy(Tensor logits, Tensor losses, Tensor targets, int N, int V, int Vp,
                    float dloss) override {
    kernels::CrossEntropyCpu(logits.f32(), losses.f32(), targets.i32(), N, V, Vp, dloss);
  }
  void AdamW(const AdamWStep& s, Tensor master, Tensor working, Tensor grad, Tensor m,
             Tensor v) override {
    kernels::AdamWCpu(master.f32(), grad.f32(), m.f32(), v.f32(), master.size, s.lr, s.beta1,
                      s.beta2, s.epsilon, s.weight_decay, s.t, s.grad_scale);
    if (!working.empty() && working.data != master.data) Convert(working, master);
  }
};

}  // namespace

std::unique_ptr<Device> MakeCpuDevice(int blas_threads) {
  if (blas_threads >= 1) openblas_set_num_threads(blas_threads);
  return std::make_unique<CpuDevice>();
}

}  // namespace ringmaster::trainer
