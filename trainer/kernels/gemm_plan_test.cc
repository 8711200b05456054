#include "trainer/kernels/gemm_plan.h"

#include <set>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/gemm_test_util.h"
#include "trainer/kernels/matmul.h"

namespace ringmaster::kernels::testing {
namespace {

// Elements a row-major operand with `rows` rows of stride `ld` spans.
size_t Span(int rows, int64_t ld) { return static_cast<size_t>(rows) * ld; }

TEST(GemmPlanTest, ColumnMajorMappingComputesTheRowMajorProduct) {
  int seed = 0;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (auto [m, n, k] : {std::tuple{1, 1, 1}, {3, 5, 7}, {8, 2, 9}, {16, 12, 4}}) {
        for (int pad : {0, 3}) {
          RowMajorGemm g{ta, tb, m, n, k, (ta ? m : k) + pad, (tb ? k : n) + pad, n + pad};
          ASSERT_TRUE(StridesValid(g));
          const std::vector<float> a = RandomVector(Span(ta ? k : m, g.lda), ++seed);
          const std::vector<float> b = RandomVector(Span(tb ? n : k, g.ldb), ++seed);
          std::vector<float> want = RandomVector(Span(m, g.ldc), ++seed);
          std::vector<float> got = want;
          NaiveRowMajorGemm(g, 0.5f, a.data(), b.data(), 2.0f, want.data());
          // cuBLAS's A is the row-major b and its B the row-major a.
          NaiveColumnMajorGemm(ToColumnMajor(g), 0.5f, b.data(), a.data(), 2.0f, got.data());
          ASSERT_EQ(got, want) << "ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n
                               << " k=" << k << " pad=" << pad;
        }
      }
    }
  }
}

TEST(GemmPlanTest, StoredShapesFitTheirLeadingDimensions) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      RowMajorGemm g{ta, tb, 3, 5, 7, ta ? 3 : 7, tb ? 7 : 5, 5};
      const ColumnMajorGemm c = ToColumnMajor(g);
      const StoredMatrix A = StoredA(c), B = StoredB(c), C = StoredC(c);
      // Column-major: rows <= ld, and the columns of the stored matrix are the rows of the
      // row-major operand it came from.
      EXPECT_LE(A.rows, A.ld);
      EXPECT_LE(B.rows, B.ld);
      EXPECT_LE(C.rows, C.ld);
      EXPECT_EQ(A.cols, tb ? 5 : 7);  // row-major b is k x n, or n x k when transposed
      EXPECT_EQ(B.cols, ta ? 7 : 3);  // row-major a is m x k, or k x m when transposed
      EXPECT_EQ(C.rows, 5);
      EXPECT_EQ(C.cols, 3);
    }
  }
}

TEST(GemmPlanTest, StridesValid) {
  EXPECT_TRUE(StridesValid({false, false, 2, 3, 4, 4, 3, 3}));
  EXPECT_FALSE(StridesValid({false, false, 2, 3, 4, 3, 3, 3}));  // lda < k
  EXPECT_FALSE(StridesValid({true, false, 2, 3, 4, 1, 3, 3}));   // transposed: lda < m
  EXPECT_FALSE(StridesValid({false, true, 2, 3, 4, 4, 3, 3}));   // transposed b: ldb < k
  EXPECT_FALSE(StridesValid({false, false, 2, 3, 4, 4, 3, 2}));  // ldc < n
}

TEST(GemmPlanTest, DenseLayerGemmsMatchTheCpuReference) {
  const int N = 6, IC = 10, OC = 7;
  const std::vector<float> inp = RandomVector(N * IC, 1), weight = RandomVector(OC * IC, 2);
  const std::vector<float> dout = RandomVector(N * OC, 3);
  std::vector<float> out_ref(N * OC), out(N * OC);
  MatmulForwardCpu(out_ref.data(), nullptr, inp.data(), weight.data(), nullptr, N, IC, OC);
  NaiveRowMajorGemm(MatmulForwardGemm(N, IC, OC), 1, inp.data(), weight.data(), 0, out.data());
  for (int i = 0; i < N * OC; ++i) EXPECT_NEAR(out[i], out_ref[i], 1e-5) << i;

  std::vector<float> dinp_ref(N * IC), dw_ref = RandomVector(OC * IC, 4);
  std::vector<float> dinp(N * IC), dw = dw_ref;
  MatmulBackwardCpu(dinp_ref.data(), dw_ref.data(), nullptr, dout.data(), inp.data(), weight.data(),
                    N, IC, OC);
  NaiveRowMajorGemm(MatmulInputGradGemm(N, IC, OC), 1, dout.data(), weight.data(), 0, dinp.data());
  NaiveRowMajorGemm(MatmulWeightGradGemm(N, IC, OC), 1, dout.data(), inp.data(), 1, dw.data());
  for (int i = 0; i < N * IC; ++i) EXPECT_NEAR(dinp[i], dinp_ref[i], 1e-5) << i;
  for (int i = 0; i < OC * IC; ++i) EXPECT_NEAR(dw[i], dw_ref[i], 1e-5) << i;
}

TEST(GemmPlanTest, EpiloguePlans) {
  using E = Epilogue;
  struct Case {
    bool bias, gelu, fuse_bias, fuse_gelu;
    int cols;
    EpiloguePlan want;
  };
  const Case cases[] = {
      {false, false, true, true, 16, {E::kNone, false, false}},
      {true, false, true, true, 16, {E::kBias, false, false}},
      {true, false, false, true, 16, {E::kNone, true, false}},
      {true, true, true, true, 16, {E::kGeluAuxBias, false, false}},
      {false, true, true, true, 16, {E::kGeluAux, false, false}},
      // cuBLASLt needs the auxiliary leading dimension divisible by 8.
      {true, true, true, true, 12, {E::kBias, false, true}},
      {false, true, true, true, 12, {E::kNone, false, true}},
      {true, true, true, false, 16, {E::kBias, false, true}},
      // GELU cannot be fused ahead of an unfused bias.
      {true, true, false, true, 16, {E::kNone, true, true}},
      {true, true, false, false, 16, {E::kNone, true, true}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(PlanMatmulEpilogue(c.bias, c.gelu, c.fuse_bias, c.fuse_gelu, c.cols), c.want)
        << c.bias << c.gelu << c.fuse_bias << c.fuse_gelu << " " << c.cols;
  }
}

TEST(GemmPlanTest, FallbacksEndUnfusedWithTheSameWork) {
  for (bool bias : {false, true}) {
    for (bool gelu : {false, true}) {
      std::optional<EpiloguePlan> plan = PlanMatmulEpilogue(bias, gelu, true, true, 16);
      int steps = 0;
      EpiloguePlan last = *plan;
      while (plan.has_value()) {
        last = *plan;
        plan = FallbackEpilogue(*plan);
        ASSERT_LE(++steps, 3);
      }
      EXPECT_EQ(last.epilogue, Epilogue::kNone);
      EXPECT_EQ(last.bias_kernel, bias);
      EXPECT_EQ(last.gelu_kernel, gelu);
    }
  }
  EXPECT_EQ(*FallbackEpilogue({Epilogue::kGeluAuxBias, false, false}),
            (EpiloguePlan{Epilogue::kBias, false, true}));
}

TEST(GemmPlanTest, PlanCountsNameEachEpilogue) {
  GemmPlanCounts counts;
  EXPECT_EQ(FormatGemmPlanCounts(counts), "cuBLASLt 0; no algorithm 0");
  counts.with_algorithm[static_cast<int>(Epilogue::kNone)] = 6;
  counts.with_algorithm[static_cast<int>(Epilogue::kBias)] = 2;
  counts.with_algorithm[static_cast<int>(Epilogue::kGeluAuxBias)] = 1;
  counts.without_algorithm[static_cast<int>(Epilogue::kGeluAux)] = 1;
  EXPECT_EQ(FormatGemmPlanCounts(counts),
            "cuBLASLt 9 (none 6, bias 2, gelu_aux_bias 1); no algorithm 1 (gelu_aux 1)");
}

TEST(GemmPlanTest, PointerAlignment) {
  alignas(256) static char buffer[1024];
  EXPECT_EQ(PointerAlignment(nullptr), 256);
  EXPECT_EQ(PointerAlignment(buffer), 256);
  EXPECT_EQ(PointerAlignment(buffer + 512), 256);
  EXPECT_EQ(PointerAlignment(buffer + 2), 2);
  EXPECT_EQ(PointerAlignment(buffer + 6), 2);
  EXPECT_EQ(PointerAlignment(buffer + 1), 1);
  EXPECT_EQ(PointerAlignment(buffer + 16), 16);
  EXPECT_EQ(PointerAlignment(buffer + 48), 16);
  EXPECT_EQ(PointerAlignment(buffer + 128), 128);
}

TEST(GemmPlanTest, AttentionBatchesVisitEveryHeadOnce) {
  for (auto [B, NH] : {std::pair{1, 1}, {2, 4}, {4, 2}, {3, 3}, {8, 12}, {16, 12}}) {
    const int T = 5, C = 4 * NH;
    const AttentionBatches p = PlanAttentionBatches(B, T, C, NH);
    EXPECT_EQ(p.calls, std::min(B, NH));
    EXPECT_EQ(p.batch, std::max(B, NH));
    std::set<std::tuple<int64_t, int64_t, int64_t>> got, want;
    for (int call = 0; call < p.calls; ++call) {
      for (int i = 0; i < p.batch; ++i) {
        got.insert({call * p.call_qkv + i * p.batch_qkv, call * p.call_att + i * p.batch_att,
                    call * p.call_out + i * p.batch_out});
      }
    }
    const int hs = C / NH;
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        want.insert({int64_t{b} * T * 3 * C + h * hs, (int64_t{b} * NH + h) * T * T,
                     int64_t{b} * T * C + h * hs});
      }
    }
    EXPECT_EQ(got, want) << "B=" << B << " NH=" << NH;
  }
}

TEST(GemmPlanTest, AttentionGemmsHaveValidStrides) {
  for (auto g : {AttentionScoresGemm(7, 12, 3), AttentionOutputGemm(7, 12, 3),
                 AttentionProbGradGemm(7, 12, 3), AttentionValueGradGemm(7, 12, 3),
                 AttentionQueryGradGemm(7, 12, 3), AttentionKeyGradGemm(7, 12, 3)}) {
    EXPECT_TRUE(StridesValid(g));
    EXPECT_EQ(g.k == 4 || g.k == 7, true);
  }
}

}  // namespace
}  // namespace ringmaster::kernels::testing
