// The dense-layer schedule on CPU steps (naive GEMMs, the CPU GELU): every epilogue plan and
// every fallback produces the CPU reference's results.
#include "trainer/kernels/matmul_schedule.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/elementwise.h"
#include "trainer/kernels/gelu.h"
#include "trainer/kernels/gemm_test_util.h"
#include "trainer/kernels/matmul.h"
#include "trainer/kernels/reduce.h"

namespace ringmaster::kernels::testing {
namespace {

class CpuMatmulSteps final : public MatmulSteps {
 public:
  explicit CpuMatmulSteps(std::set<Epilogue> unsupported) : unsupported_(std::move(unsupported)) {}

  absl::StatusOr<bool> Gemm(const RowMajorGemm& g, float alpha, const void* a, const void* b,
                            float beta, void* c, Epilogue epilogue, const void* bias,
                            void* aux) override {
    if (unsupported_.count(epilogue) > 0) return false;
    epilogues.push_back(epilogue);
    const bool has_bias = epilogue == Epilogue::kBias || epilogue == Epilogue::kGeluAuxBias;
    const bool has_gelu = epilogue == Epilogue::kGeluAux || epilogue == Epilogue::kGeluAuxBias;
    if (has_bias != (bias != nullptr) || has_gelu != (aux != nullptr)) {
      return absl::InternalError("epilogue operands do not match the epilogue");
    }
    if (has_gelu && beta != 0) return absl::InternalError("GELU epilogue with beta != 0");
    float* out = static_cast<float*>(has_gelu ? aux : c);
    NaiveRowMajorGemm(g, alpha, static_cast<const float*>(a), static_cast<const float*>(b), beta,
                      out);
    if (has_bias) AddBiasCpu(out, static_cast<const float*>(bias), g.m, g.n);
    if (has_gelu) GeluForwardCpu(static_cast<float*>(c), out, int64_t{g.m} * g.n);
    return true;
  }
  absl::Status AddBias(void* out, const void* bias, int rows, int cols) override {
    ++bias_kernels;
    AddBiasCpu(static_cast<float*>(out), static_cast<const float*>(bias), rows, cols);
    return absl::OkStatus();
  }
  absl::Status Gelu(void* out, const void* in, int64_t n) override {
    ++gelu_kernels;
    GeluForwardCpu(static_cast<float*>(out), static_cast<const float*>(in), n);
    return absl::OkStatus();
  }
  absl::Status ColumnSums(void* out, const void* in, int rows, int cols, bool accumulate) override {
    ColumnSumsCpu(static_cast<float*>(out), static_cast<const float*>(in), rows, cols, accumulate);
    return absl::OkStatus();
  }

  std::vector<Epilogue> epilogues;
  int bias_kernels = 0;
  int gelu_kernels = 0;

 private:
  std::set<Epilogue> unsupported_;
};

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5f * (1 + std::fabs(want[i]))) << i;
  }
}

struct ForwardCase {
  bool bias, gelu;
  MatmulFusion fusion;
  int OC;
  std::set<Epilogue> unsupported;
  Epilogue want_epilogue;
  int want_bias_kernels, want_gelu_kernels;
};

TEST(MatmulScheduleTest, ForwardMatchesTheCpuReferenceUnderEveryPlan) {
  using E = Epilogue;
  const ForwardCase cases[] = {
      {false, false, {true, true}, 16, {}, E::kNone, 0, 0},
      {true, false, {true, true}, 16, {}, E::kBias, 0, 0},
      {true, false, {false, true}, 16, {}, E::kNone, 1, 0},
      {true, true, {true, true}, 16, {}, E::kGeluAuxBias, 0, 0},
      {false, true, {true, true}, 16, {}, E::kGeluAux, 0, 0},
      {true, true, {true, true}, 12, {}, E::kBias, 0, 1},  // OC not a multiple of 8
      {true, true, {true, false}, 16, {}, E::kBias, 0, 1},
      {true, true, {false, false}, 16, {}, E::kNone, 1, 1},
      // The library offers no fused GELU, then no bias epilogue either.
      {true, true, {true, true}, 16, {E::kGeluAuxBias}, E::kBias, 0, 1},
      {true, true, {true, true}, 16, {E::kGeluAuxBias, E::kBias}, E::kNone, 1, 1},
      {false, true, {true, true}, 16, {E::kGeluAux}, E::kNone, 0, 1},
  };
  const int N = 5, IC = 9;
  int seed = 0;
  for (const ForwardCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "bias=" << c.bias << " gelu=" << c.gelu << " OC=" << c.OC
                                      << " fuse=" << c.fusion.bias << c.fusion.gelu);
    const std::vector<float> inp = RandomVector(N * IC, ++seed),
                             weight = RandomVector(c.OC * IC, ++seed);
    const std::vector<float> bias = RandomVector(c.OC, ++seed);
    std::vector<float> out_ref(N * c.OC), gelu_ref(N * c.OC);
    MatmulForwardCpu(out_ref.data(), c.gelu ? gelu_ref.data() : nullptr, inp.data(), weight.data(),
                     c.bias ? bias.data() : nullptr, N, IC, c.OC);
    // Outputs start as garbage: the schedule must overwrite them.
    std::vector<float> out = RandomVector(N * c.OC, ++seed),
                       gelu_out = RandomVector(N * c.OC, ++seed);
    CpuMatmulSteps steps(c.unsupported);
    absl::StatusOr<EpiloguePlan> plan =
        RunMatmulForward(steps, c.fusion, out.data(), c.gelu ? gelu_out.data() : nullptr,
                         inp.data(), weight.data(), c.bias ? bias.data() : nullptr, N, IC, c.OC);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->epilogue, c.want_epilogue);
    EXPECT_EQ(steps.epilogues.back(), c.want_epilogue);
    EXPECT_EQ(steps.bias_kernels, c.want_bias_kernels);
    EXPECT_EQ(steps.gelu_kernels, c.want_gelu_kernels);
    ExpectNear(out, out_ref);
    if (c.gelu) ExpectNear(gelu_out, gelu_ref);
  }
}

TEST(MatmulScheduleTest, ForwardFailsWhenNoAlgorithmExists) {
  CpuMatmulSteps steps({Epilogue::kNone, Epilogue::kBias});
  std::vector<float> x(4, 1.0f), w(4, 1.0f), out(4), bias(2);
  absl::StatusOr<EpiloguePlan> plan =
      RunMatmulForward(steps, {}, out.data(), nullptr, x.data(), w.data(), bias.data(), 2, 2, 2);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInternal);
}

TEST(MatmulScheduleTest, BackwardMatchesTheCpuReference) {
  const int N = 7, IC = 6, OC = 11;
  int seed = 100;
  for (bool with_dinp : {false, true}) {
    for (bool with_dbias : {false, true}) {
      const std::vector<float> inp = RandomVector(N * IC, ++seed),
                               weight = RandomVector(OC * IC, ++seed);
      const std::vector<float> dout = RandomVector(N * OC, ++seed);
      // dweight and dbias accumulate onto what is there; dinp is overwritten.
      std::vector<float> dw_ref = RandomVector(OC * IC, ++seed), db_ref = RandomVector(OC, ++seed);
      std::vector<float> dinp_ref(N * IC);
      std::vector<float> dw = dw_ref, db = db_ref, dinp = RandomVector(N * IC, ++seed);
      MatmulBackwardCpu(with_dinp ? dinp_ref.data() : nullptr, dw_ref.data(),
                        with_dbias ? db_ref.data() : nullptr, dout.data(), inp.data(),
                        weight.data(), N, IC, OC);
      CpuMatmulSteps steps({});
      ASSERT_TRUE(RunMatmulBackward(steps, with_dinp ? dinp.data() : nullptr, dw.data(),
                                    with_dbias ? db.data() : nullptr, dout.data(), inp.data(),
                                    weight.data(), N, IC, OC)
                      .ok());
      if (with_dinp) ExpectNear(dinp, dinp_ref);
      ExpectNear(dw, dw_ref);
      ExpectNear(db, db_ref);
    }
  }
}

}  // namespace
}  // namespace ringmaster::kernels::testing
