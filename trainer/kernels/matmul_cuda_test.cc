// Parity of the cuBLASLt dense layers (MatmulCuda) with the CPU reference (matmul.h), fp32 and
// bf16: with and without bias and GELU, fused into cuBLASLt's epilogue or not, an output width
// that cuBLASLt cannot fuse GELU for (not a multiple of 8), backward with and without dinp and
// dbias, accumulating onto existing gradients. Skipped when no GPU is visible.
// Tolerances:
//  - fp32 (no TF32): 1e-4 + 1e-4 relative; sums of up to 768 products in another order. The
//    GELU output fused into cuBLASLt's epilogue is its own tanh-approximation implementation:
//    1e-4 + 1e-3 relative.
//  - bf16: inputs rounded for the reference too, fp32 accumulation on both sides, one rounding
//    of each output (2^-9 relative): 1e-2 + 1e-2 relative.
#include "trainer/kernels/matmul_cuda.h"

#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/cuda_test_util.h"
#include "trainer/kernels/matmul.h"

namespace ringmaster::kernels::testing {
namespace {

template <typename T>
constexpr Tol kTol = PerType<T>(Tol{1e-4, 1e-4}, Tol{1e-2, 1e-2});
// The GELU output's relative tolerance when fused into the GEMM's epilogue.
template <typename T>
constexpr double kGeluRtol = PerType<T>(1e-3, 1e-2);

template <typename T>
class MatmulCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RM_SKIP_WITHOUT_GPU();
    absl::StatusOr<std::unique_ptr<MatmulCuda>> m = MatmulCuda::Create(0, kElementType<T>, nullptr);
    ASSERT_TRUE(m.ok()) << m.status();
    matmul_ = std::move(*m);
  }
  std::unique_ptr<MatmulCuda> matmul_;
};
using Types = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(MatmulCudaTest, Types);

// (N, IC, OC): degenerate, odd, fusable GELU (OC % 8 == 0), not fusable, GPT-2's MLP.
const std::tuple<int, int, int> kShapes[] = {
    {1, 1, 1}, {3, 5, 7}, {8, 16, 24}, {33, 40, 20}, {64, 768, 3072}};

TYPED_TEST(MatmulCudaTest, ForwardMatchesCpuWithAndWithoutFusion) {
  using T = TypeParam;
  int seed = 0;
  for (auto [N, IC, OC] : kShapes) {
    for (bool bias : {false, true}) {
      for (bool gelu : {false, true}) {
        for (bool fuse : {false, true}) {
          SCOPED_TRACE(::testing::Message() << N << "x" << IC << "->" << OC << " bias=" << bias
                                            << " gelu=" << gelu << " fuse=" << fuse);
          const std::vector<float> inp = RoundTo<T>(Uniform(int64_t{N} * IC, -1, 1, ++seed));
          const std::vector<float> w = RoundTo<T>(Uniform(int64_t{OC} * IC, -1, 1, ++seed));
          const std::vector<float> b = RoundTo<T>(Uniform(OC, -1, 1, ++seed));
          std::vector<float> out(int64_t{N} * OC), gelu_out(int64_t{N} * OC);
          MatmulForwardCpu(out.data(), gelu ? gelu_out.data() : nullptr, inp.data(), w.data(),
                           bias ? b.data() : nullptr, N, IC, OC);
          DeviceArray<T> d_inp(inp), d_w(w), d_b(b), d_out(Uniform(int64_t{N} * OC, 7, 8, 1)),
              d_gelu(Uniform(int64_t{N} * OC, 7, 8, 2));
          absl::StatusOr<EpiloguePlan> plan = this->matmul_->Forward(
              MatmulFusion{fuse, fuse}, d_out.get(), gelu ? d_gelu.get() : nullptr, d_inp.get(),
              d_w.get(), bias ? d_b.get() : nullptr, N, IC, OC);
          ASSERT_TRUE(plan.ok()) << plan.status();
          if (!fuse) {
            EXPECT_EQ(plan->epilogue, Epilogue::kNone);
          }
          ExpectClose(d_out.Download(), out, kTol<T>.atol, kTol<T>.rtol, "out (pre-activation)");
          if (gelu) {
            const bool fused =
                plan->epilogue == Epilogue::kGeluAux || plan->epilogue == Epilogue::kGeluAuxBias;
            ExpectClose(d_gelu.Download(), gelu_out, kTol<T>.atol,
                        fused ? kGeluRtol<T> : kTol<T>.rtol, "gelu_out");
          }
        }
      }
    }
  }
  // Plans are cached per shape, epilogue and alignment: a second pass makes none.
  const size_t plans = this->matmul_->cached_plans();
  DeviceArray<T> x(8 * 16), w(24 * 16), out(8 * 24);
  ASSERT_TRUE(
      this->matmul_->Forward({}, out.get(), nullptr, x.get(), w.get(), nullptr, 8, 16, 24).ok());
  EXPECT_EQ(this->matmul_->cached_plans(), plans);
}

TYPED_TEST(MatmulCudaTest, BackwardMatchesCpu) {
  using T = TypeParam;
  int seed = 100;
  for (auto [N, IC, OC] : kShapes) {
    for (bool with_dinp : {false, true}) {
      for (bool with_dbias : {false, true}) {
        SCOPED_TRACE(::testing::Message() << N << "x" << IC << "->" << OC << " dinp=" << with_dinp
                                          << " dbias=" << with_dbias);
        const std::vector<float> inp = RoundTo<T>(Uniform(int64_t{N} * IC, -1, 1, ++seed));
        const std::vector<float> w = RoundTo<T>(Uniform(int64_t{OC} * IC, -1, 1, ++seed));
        const std::vector<float> dout = RoundTo<T>(Uniform(int64_t{N} * OC, -1, 1, ++seed));
        std::vector<float> dinp(int64_t{N} * IC);
        std::vector<float> dw = RoundTo<T>(Uniform(int64_t{OC} * IC, -1, 1, ++seed));
        std::vector<float> db = RoundTo<T>(Uniform(OC, -1, 1, ++seed));
        DeviceArray<T> d_inp(inp), d_w(w), d_dout(dout), d_dinp(Uniform(dinp.size(), 7, 8, 3)),
            d_dw(dw), d_db(db);
        MatmulBackwardCpu(with_dinp ? dinp.data() : nullptr, dw.data(),
                          with_dbias ? db.data() : nullptr, dout.data(), inp.data(), w.data(), N,
                          IC, OC);
        ASSERT_TRUE(this->matmul_
                        ->Backward(with_dinp ? d_dinp.get() : nullptr, d_dw.get(),
                                   with_dbias ? d_db.get() : nullptr, d_dout.get(), d_inp.get(),
                                   d_w.get(), N, IC, OC)
                        .ok());
        if (with_dinp) ExpectClose(d_dinp.Download(), dinp, kTol<T>.atol, kTol<T>.rtol, "dinp");
        ExpectClose(d_dw.Download(), dw, kTol<T>.atol, kTol<T>.rtol, "dweight");
        ExpectClose(d_db.Download(), db, kTol<T>.atol + 2e-7 * N, kTol<T>.rtol, "dbias");
      }
    }
  }
}

}  // namespace
}  // namespace ringmaster::kernels::testing
