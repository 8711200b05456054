// Row-major GEMMs through cuBLAS (cublas_gemm.h) against a naive CPU GEMM, fp32 and bf16,
// every transpose combination, padded strides, beta 0 and 1, strided batches. Skipped when no
// GPU is visible.
// Tolerances: fp32 (no TF32) 1e-5 + 1e-5 relative (k <= 33); bf16 one output rounding on top
// of the same fp32 accumulation: 1e-2 + 1e-2 relative.
#include "trainer/kernels/cublas_gemm.h"

#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/cuda_test_util.h"
#include "trainer/kernels/gemm_test_util.h"

namespace ringmaster::kernels::testing {
namespace {

template <typename T>
constexpr double kTol = PerType<T>(1e-5, 1e-2);

template <typename T>
class CublasGemmTest : public CublasTypedTest<T> {};
TYPED_TEST_SUITE(CublasGemmTest, ElementTypes);

TYPED_TEST(CublasGemmTest, MatchesNaiveRowMajorGemm) {
  using T = TypeParam;
  int seed = 0;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (auto [m, n, k] : {std::tuple{1, 1, 1}, {7, 5, 3}, {16, 24, 33}}) {
        for (float beta : {0.0f, 1.0f}) {
          for (int batch : {1, 3}) {
            SCOPED_TRACE(::testing::Message()
                         << "ta=" << ta << " tb=" << tb << " " << m << "x" << n << "x" << k
                         << " beta=" << beta << " batch=" << batch);
            const int pad = 2;
            const RowMajorGemm g{ta, tb, m, n, k, (ta ? m : k) + pad, (tb ? k : n) + pad, n + pad};
            const int64_t sa = int64_t{ta ? k : m} * g.lda, sb = int64_t{tb ? n : k} * g.ldb;
            const int64_t sc = int64_t{m} * g.ldc;
            const std::vector<float> a = RoundTo<T>(Uniform(sa * batch, -1, 1, ++seed));
            const std::vector<float> b = RoundTo<T>(Uniform(sb * batch, -1, 1, ++seed));
            std::vector<float> c = RoundTo<T>(Uniform(sc * batch, -1, 1, ++seed));
            DeviceArray<T> d_a(a), d_b(b), d_c(c);
            for (int i = 0; i < batch; ++i) {
              testing::NaiveRowMajorGemm(g, 0.5f, a.data() + i * sa, b.data() + i * sb, beta,
                                         c.data() + i * sc);
            }
            absl::Status s = batch == 1 ? RowMajorGemmCuda(this->cublas_, kElementType<T>, g, 0.5f,
                                                           d_a.get(), d_b.get(), beta, d_c.get())
                                        : RowMajorBatchedGemmCuda(this->cublas_, kElementType<T>, g,
                                                                  0.5f, d_a.get(), sa, d_b.get(),
                                                                  sb, beta, d_c.get(), sc, batch);
            ASSERT_TRUE(s.ok()) << s;
            // The padding between rows of c must be left alone: compare everything.
            ExpectClose(d_c.Download(), RoundTo<T>(c), kTol<T>, kTol<T>, "c");
          }
        }
      }
    }
  }
}

TYPED_TEST(CublasGemmTest, RefusesStridesThatDoNotCoverTheMatrices) {
  const RowMajorGemm g{false, false, 4, 4, 4, /*lda=*/3, 4, 4};
  DeviceArray<TypeParam> x(64);
  EXPECT_EQ(
      RowMajorGemmCuda(this->cublas_, kElementType<TypeParam>, g, 1, x.get(), x.get(), 0, x.get())
          .code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringmaster::kernels::testing
