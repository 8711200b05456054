// The compute device the GPT model is written against: memory, a GEMM, and the handful of fused
// operations a GPT-2 step needs (llm.c's kernel set). The CPU device (cpu_device.h) implements
// it with OpenBLAS in fp32; a CUDA device implements the same contract with cuBLAS(Lt) and its
// own kernels, so neither the model nor the parallel code changes between them.
//
// Conventions for every operation:
//  - Matrices are row-major. N = B*T rows (tokens of a microbatch), C channels.
//  - "Overwrites" means the output is written without reading it; "accumulates" means
//    `out += result` (gradients accumulate across microbatches).
//  - Tensors are views of this device's memory in compute_dtype() unless a dtype is stated
//    (token ids and targets are kI32; losses, LayerNorm statistics, master weights and optimizer
//    state are kF32).
//  - Operations are ordered as issued. They may run asynchronously (GPU); a device error is
//    reported by the next Synchronize() or host read (SumSquares, CopyToHost). The CPU device
//    runs everything synchronously and cannot fail after allocation.
// A Device is used by one thread at a time, except Allocate/CopyToHost/CopyToDevice, which are
// thread-safe. (The trainer copies checkpoint state to the host on its training thread; the
// checkpoint writer's thread only sees that host copy.)
#ifndef RINGMASTER_TRAINER_MODEL_DEVICE_H_
#define RINGMASTER_TRAINER_MODEL_DEVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "trainer/kernels/adamw_hyper.h"
#include "trainer/model/tensor.h"

namespace ringmaster::trainer {

// Owns one allocation of a Device. Move-only; frees on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Tensor view, std::function<void(void*)> release)
      : view_(view), release_(std::move(release)) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      view_ = std::exchange(other.view_, Tensor{});
      release_ = std::exchange(other.release_, nullptr);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  const Tensor& tensor() const { return view_; }
  Tensor Slice(int64_t offset, int64_t count) const { return view_.Slice(offset, count); }

 private:
  void Reset() {
    if (release_ && view_.data != nullptr) release_(view_.data);
    view_ = Tensor{};
    release_ = nullptr;
  }
  Tensor view_;
  std::function<void(void*)> release_;
};

// A point in a device's stream of work: everything issued on it before Device::Mark returned.
// Opaque; a backend's communicator knows its own device's marks (nccl_communicator.h).
class DeviceMark {
 public:
  virtual ~DeviceMark() = default;
};

// Hyper-parameters of one AdamW update (decoupled weight decay, bias-corrected moments).
using AdamWStep = kernels::AdamWHyper;

class Device {
 public:
  virtual ~Device() = default;

  // "cpu" or "cuda:N".
  virtual std::string name() const = 0;
  // Element type of activations, working weights and gradients (kF32 on CPU).
  virtual DType compute_dtype() const = 0;

  // ---- Memory ----
  // A zero-filled buffer of `size` elements. RESOURCE_EXHAUSTED when memory runs out.
  virtual absl::StatusOr<DeviceBuffer> Allocate(int64_t size, DType dtype) = 0;
  // Copies dst.bytes() bytes from host memory into `dst`.
  virtual absl::Status CopyToDevice(Tensor dst, const void* host) = 0;
  // Copies src.bytes() bytes of `src` into host memory (waits for pending work on `src`).
  virtual absl::Status CopyToHost(void* host, Tensor src) = 0;
  // dst = src, converting between kF32 and kBF16 as needed. Same size.
  virtual void Convert(Tensor dst, Tensor src) = 0;
  // Sets every element to zero.
  virtual void Zero(Tensor t) = 0;
  // t *= factor.
  virtual void Scale(Tensor t, float factor) = 0;
  // Sum of squares of the elements of all `tensors` (as double), read back to the host once: the
  // gradient norm of a whole model costs one device round trip, not one per tensor.
  virtual absl::StatusOr<double> SumSquares(absl::Span<const Tensor> tensors) = 0;
  // Waits for all issued work; reports the first device error.
  virtual absl::Status Synchronize() = 0;
  // The work issued so far, for another thread's communicator to order an operation after
  // (Communicator::ScopedOrder): a collective queued while the device is still far behind the
  // issuing thread (a backward pass queued ahead) then waits for the kernels that wrote its
  // data, not for everything issued by the time it starts. Null where issued work has already
  // run (the CPU device) or a mark cannot be made (the operation then orders itself after all
  // the work issued when it starts, which is later, so still correct).
  virtual std::shared_ptr<const DeviceMark> Mark() { return nullptr; }

  // ---- GEMM ----
  // c = alpha * op(a) * op(b) + beta * c with op(x) = x or x^T; op(a) is m x k, op(b) is k x n,
  // c is m x n; lda/ldb/ldc are row strides in elements.
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, Tensor a, int lda,
                    Tensor b, int ldb, float beta, Tensor c, int ldc) = 0;

  // ---- Fused model operations ----
  // out[N,C] = wte[tokens] + wpe[position]; tokens kI32 [B*T]; overwrites.
  virtual void EmbeddingForward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int B, int T,
                                int C) = 0;
  // dwte[tokens] += dout, dwpe[position] += dout; accumulates. Either of dwte, dwpe may be empty.
  virtual void EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int B, int T,
                                 int C) = 0;
  // out = LayerNorm(inp) * weight + bias over the last dim (eps 1e-5); saves mean and rstd
  // (kF32 [N]) for the backward pass. Overwrites out, mean, rstd.
  virtual void LayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                                Tensor bias, int N, int C) = 0;
  // residual = a + b, then out = LayerNorm(residual) as above. Overwrites residual, out, mean,
  // rstd.
  virtual void ResidualLayerNormForward(Tensor residual, Tensor out, Tensor mean, Tensor rstd,
                                        Tensor a, Tensor b, Tensor weight, Tensor bias, int N,
                                        int C) = 0;
  // Accumulates dinp, dweight, dbias from dout.
  virtual void LayerNormBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                 Tensor weight, Tensor mean, Tensor rstd, int N, int C) = 0;
  // out[N,OC] = inp[N,IC] * weight[OC,IC]^T (+ bias[OC] when not empty). With `gelu_out` not
  // empty, also gelu_out = GELU(out) (tanh approximation), keeping `out` as the pre-activation
  // for the backward pass. Overwrites.
  virtual void MatmulForward(Tensor out, Tensor gelu_out, Tensor inp, Tensor weight, Tensor bias,
                             int N, int IC, int OC) = 0;
  // dinp[N,IC] = dout * weight (overwrites; skipped when dinp is empty);
  // dweight[OC,IC] += dout^T * inp; dbias[OC] += column sums of dout (skipped when empty).
  virtual void MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                              Tensor weight, int N, int IC, int OC) = 0;
  // dinp = GELU'(pre) * dout, elementwise over n elements. Overwrites; dinp may alias dout.
  virtual void GeluBackward(Tensor dinp, Tensor pre, Tensor dout, int64_t n) = 0;
  // Causal multi-head self-attention. qkv[N, 3*C'] holds per token Q, K and V, each NH heads of
  // C'/NH (C' = NH * head size, the width this rank holds); out[N,C'] is the heads' outputs side
  // by side; att keeps what the backward pass needs, AttentionStateSize elements of the compute
  // dtype: the softmax probabilities [B,NH,T,T], or a fused implementation's smaller state.
  // Overwrites.
  virtual void AttentionForward(Tensor out, Tensor att, Tensor qkv, int B, int T, int C,
                                int NH) = 0;
  // dqkv (overwrites) from dout; out and att are the forward pass's; datt is scratch of att's
  // size.
  virtual void AttentionBackward(Tensor dqkv, Tensor datt, Tensor dout, Tensor out, Tensor qkv,
                                 Tensor att, int B, int T, int C, int NH) = 0;
  // Elements of att (and of datt) for a shape.
  virtual int64_t AttentionStateSize(int B, int T, int C, int NH) const = 0;
  // How attention runs for heads of C/NH channels: "materialized" or "fused".
  virtual const char* AttentionKind(int C, int NH) const = 0;
  // out = a + b over n elements. Overwrites; out may alias a or b.
  virtual void Add(Tensor out, Tensor a, Tensor b, int64_t n) = 0;
  // Softmax cross-entropy over logits[N, Vp], of which the first V columns are real (the rest,
  // vocabulary padding, get probability 0). losses (kF32 [N]) = -log p(target); targets kI32 [N],
  // each in [0, V) (not checked here: the model checks the tokens it is given).
  // When dloss != 0, logits are overwritten by dlogits = (softmax - onehot) * dloss.
  virtual void CrossEntropy(Tensor logits, Tensor losses, Tensor targets, int N, int V, int Vp,
                            float dloss) = 0;

  // ---- Optimizer ----
  // One AdamW step over matching ranges: master (kF32) is updated from grad (compute dtype) with
  // moments m, v (kF32); `working` (compute dtype) receives the new weights when it is not the
  // same memory as master.
  virtual void AdamW(const AdamWStep& step, Tensor master, Tensor working, Tensor grad, Tensor m,
                     Tensor v) = 0;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_MODEL_DEVICE_H_
