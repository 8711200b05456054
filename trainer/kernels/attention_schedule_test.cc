// The attention schedule on CPU steps (naive strided-batched GEMMs, a CPU causal softmax)
// reproduces the CPU reference, forward and backward, whichever dimension it batches over.
#include "trainer/kernels/attention_schedule.h"

#include <cmath>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/attention.h"
#include "trainer/kernels/gemm_test_util.h"

namespace ringmaster::kernels::testing {
namespace {

class CpuAttentionSteps final : public AttentionSteps {
 public:
  absl::Status BatchedGemm(const RowMajorGemm& g, float alpha, const void* a, int64_t stride_a,
                           const void* b, int64_t stride_b, float beta, void* c, int64_t stride_c,
                           int batch) override {
    ++gemm_calls;
    for (int i = 0; i < batch; ++i) {
      NaiveRowMajorGemm(g, alpha, static_cast<const float*>(a) + i * stride_a,
                        static_cast<const float*>(b) + i * stride_b, beta,
                        static_cast<float*>(c) + i * stride_c);
    }
    return absl::OkStatus();
  }
  absl::Status CausalSoftmax(void* att, int64_t rows, int T) override {
    CausalSoftmaxCpu(static_cast<float*>(att), rows, T);
    return absl::OkStatus();
  }
  absl::Status CausalSoftmaxBackward(void* datt, const void* att, int64_t rows, int T) override {
    CausalSoftmaxBackwardCpu(static_cast<float*>(datt), static_cast<const float*>(att), rows, T);
    return absl::OkStatus();
  }
  int gemm_calls = 0;
};

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 2e-5f * (1 + std::fabs(want[i]))) << what << " " << i;
  }
}

TEST(AttentionScheduleTest, MatchesTheCpuReference) {
  int seed = 0;
  // (B, T, C, NH): heads batched (NH >= B) and rows batched (B > NH), T = 1 included.
  for (auto [B, T, C, NH] :
       {std::tuple{1, 1, 8, 2}, {2, 5, 12, 3}, {4, 7, 16, 2}, {1, 16, 32, 4}, {3, 9, 6, 1}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << B << " T=" << T << " C=" << C << " NH=" << NH);
    const size_t nqkv = size_t{1} * B * T * 3 * C, natt = size_t{1} * B * NH * T * T;
    const size_t nout = size_t{1} * B * T * C;
    const std::vector<float> qkv = RandomVector(nqkv, ++seed), dout = RandomVector(nout, ++seed);

    std::vector<float> out_ref(nout), att_ref(natt);
    AttentionForwardCpu(out_ref.data(), att_ref.data(), qkv.data(), B, T, C, NH);
    std::vector<float> out = RandomVector(nout, ++seed), att = RandomVector(natt, ++seed);
    CpuAttentionSteps steps;
    ASSERT_TRUE(
        RunAttentionForward(steps, 4, out.data(), att.data(), qkv.data(), B, T, C, NH).ok());
    EXPECT_EQ(steps.gemm_calls, 2 * std::min(B, NH));
    ExpectNear(att, att_ref, "att");
    ExpectNear(out, out_ref, "out");

    std::vector<float> dqkv_ref(nqkv), datt_ref(natt);
    AttentionBackwardCpu(dqkv_ref.data(), datt_ref.data(), dout.data(), qkv.data(), att_ref.data(),
                         B, T, C, NH);
    std::vector<float> dqkv = RandomVector(nqkv, ++seed), datt = RandomVector(natt, ++seed);
    ASSERT_TRUE(RunAttentionBackward(steps, 4, dqkv.data(), datt.data(), dout.data(), qkv.data(),
                                     att.data(), B, T, C, NH)
                    .ok());
    ExpectNear(dqkv, dqkv_ref, "dqkv");
  }
}

}  // namespace
}  // namespace ringmaster::kernels::testing
