// The order of operations of causal attention (attention.h) as the CUDA device runs it: the
// per-head GEMMs as strided batches (gemm_plan.h's PlanAttentionBatches), and the causal softmax
// passes between them over the whole [B, NH, T, T] probability tensor at once.
//
// The steps are an interface so that the same schedule drives the CUDA implementation
// (attention_cuda.h: cuBLAS and the softmax kernels) and a CPU implementation in the tests
// (attention_schedule_test.cc), which checks it against the CPU reference. Pointers are opaque
// (device memory on the GPU); `element_bytes` is the size of one element of every tensor.
#ifndef RINGMASTER_TRAINER_KERNELS_ATTENTION_SCHEDULE_H_
#define RINGMASTER_TRAINER_KERNELS_ATTENTION_SCHEDULE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "trainer/kernels/gemm_plan.h"

namespace ringmaster::kernels {

class AttentionSteps {
 public:
  virtual ~AttentionSteps() = default;
  // For i < batch: c_i = alpha op(a_i) op(b_i) + beta c_i with x_i = x + i * stride_x elements.
  virtual absl::Status BatchedGemm(const RowMajorGemm& g, float alpha, const void* a,
                                   int64_t stride_a, const void* b, int64_t stride_b, float beta,
                                   void* c, int64_t stride_c, int batch) = 0;
  // In place over `rows` rows of T scores, row r being query position r % T: softmax over
  // columns 0..r%T, zeros above the diagonal.
  virtual absl::Status CausalSoftmax(void* att, int64_t rows, int T) = 0;
  // In place: datt = att * (datt - sum(att * datt)) over the same causal columns; zeros above.
  virtual absl::Status CausalSoftmaxBackward(void* datt, const void* att, int64_t rows, int T) = 0;
};

// out and att overwritten (attention.h's AttentionForwardCpu).
absl::Status RunAttentionForward(AttentionSteps& steps, int element_bytes, void* out, void* att,
                                 const void* qkv, int B, int T, int C, int NH);

// dqkv overwritten, datt scratch (attention.h's AttentionBackwardCpu).
absl::Status RunAttentionBackward(AttentionSteps& steps, int element_bytes, void* dqkv, void* datt,
                                  const void* dout, const void* qkv, const void* att, int B, int T,
                                  int C, int NH);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_ATTENTION_SCHEDULE_H_
