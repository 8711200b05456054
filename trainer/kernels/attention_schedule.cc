#include "trainer/kernels/attention_schedule.h"

#include <cmath>

namespace ringmaster::kernels {
namespace {

// Byte arithmetic on opaque pointers.
const void* At(const void* base, int64_t elements, int element_bytes) {
  return static_cast<const char*>(base) + elements * element_bytes;
}
void* At(void* base, int64_t elements, int element_bytes) {
  return static_cast<char*>(base) + elements * element_bytes;
}

}  // namespace

absl::Status RunAttentionForward(AttentionSteps& steps, int element_bytes, void* out, void* att,
                                 const void* qkv, int B, int T, int C, int NH) {
  const AttentionBatches p = PlanAttentionBatches(B, T, C, NH);
  const float scale = 1.0f / std::sqrt(static_cast<float>(C / NH));
  const int e = element_bytes;
  for (int call = 0; call < p.calls; ++call) {
    const void* q = At(qkv, call * p.call_qkv, e);
    const void* k = At(q, C, e);
    absl::Status s =
        steps.BatchedGemm(AttentionScoresGemm(T, C, NH), scale, q, p.batch_qkv, k, p.batch_qkv,
                          0.0f, At(att, call * p.call_att, e), p.batch_att, p.batch);
    if (!s.ok()) return s;
  }
  absl::Status s = steps.CausalSoftmax(att, int64_t{B} * NH * T, T);
  if (!s.ok()) return s;
  for (int call = 0; call < p.calls; ++call) {
    const void* v = At(qkv, call * p.call_qkv + 2LL * C, e);
    s = steps.BatchedGemm(AttentionOutputGemm(T, C, NH), 1.0f, At(att, call * p.call_att, e),
                          p.batch_att, v, p.batch_qkv, 0.0f, At(out, call * p.call_out, e),
                          p.batch_out, p.batch);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status RunAttentionBackward(AttentionSteps& steps, int element_bytes, void* dqkv, void* datt,
                                  const void* dout, const void* qkv, const void* att, int B, int T,
                                  int C, int NH) {
  const AttentionBatches p = PlanAttentionBatches(B, T, C, NH);
  const float scale = 1.0f / std::sqrt(static_cast<float>(C / NH));
  const int e = element_bytes;
  for (int call = 0; call < p.calls; ++call) {
    const void* v = At(qkv, call * p.call_qkv + 2LL * C, e);
    const void* dy = At(dout, call * p.call_out, e);
    void* dv = At(dqkv, call * p.call_qkv + 2LL * C, e);
    // datt = dy v^T; dv = att^T dy.
    absl::Status s =
        steps.BatchedGemm(AttentionProbGradGemm(T, C, NH), 1.0f, dy, p.batch_out, v, p.batch_qkv,
                          0.0f, At(datt, call * p.call_att, e), p.batch_att, p.batch);
    if (!s.ok()) return s;
    s = steps.BatchedGemm(AttentionValueGradGemm(T, C, NH), 1.0f, At(att, call * p.call_att, e),
                          p.batch_att, dy, p.batch_out, 0.0f, dv, p.batch_qkv, p.batch);
    if (!s.ok()) return s;
  }
  absl::Status s = steps.CausalSoftmaxBackward(datt, att, int64_t{B} * NH * T, T);
  if (!s.ok()) return s;
  for (int call = 0; call < p.calls; ++call) {
    const void* q = At(qkv, call * p.call_qkv, e);
    const void* k = At(q, C, e);
    const void* ds = At(datt, call * p.call_att, e);
    void* dq = At(dqkv, call * p.call_qkv, e);
    void* dk = At(dq, C, e);
    // dq = scale * ds k; dk = scale * ds^T q.
    s = steps.BatchedGemm(AttentionQueryGradGemm(T, C, NH), scale, ds, p.batch_att, k, p.batch_qkv,
                          0.0f, dq, p.batch_qkv, p.batch);
    if (!s.ok()) return s;
    s = steps.BatchedGemm(AttentionKeyGradGemm(T, C, NH), scale, ds, p.batch_att, q, p.batch_qkv,
                          0.0f, dk, p.batch_qkv, p.batch);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace ringmaster::kernels
