#include "trainer/kernels/matmul_schedule.h"

#include "absl/strings/str_cat.h"

namespace ringmaster::kernels {

absl::StatusOr<EpiloguePlan> RunMatmulForward(MatmulSteps& steps, MatmulFusion fusion, void* out,
                                              void* gelu_out, const void* inp, const void* weight,
                                              const void* bias, int N, int IC, int OC) {
  const bool has_bias = bias != nullptr;
  const bool has_gelu = gelu_out != nullptr;
  std::optional<EpiloguePlan> plan =
      PlanMatmulEpilogue(has_bias, has_gelu, fusion.bias, fusion.gelu, OC);
  const RowMajorGemm g = MatmulForwardGemm(N, IC, OC);
  while (plan.has_value()) {
    const bool gelu_fused =
        plan->epilogue == Epilogue::kGeluAux || plan->epilogue == Epilogue::kGeluAuxBias;
    // With GELU fused, the GEMM's output is the activation and the pre-activation goes to aux.
    void* c = gelu_fused ? gelu_out : out;
    void* aux = gelu_fused ? out : nullptr;
    const bool bias_fused =
        plan->epilogue == Epilogue::kBias || plan->epilogue == Epilogue::kGeluAuxBias;
    absl::StatusOr<bool> ran =
        steps.Gemm(g, 1.0f, inp, weight, 0.0f, c, plan->epilogue, bias_fused ? bias : nullptr, aux);
    if (!ran.ok()) return ran.status();
    if (*ran) break;
    plan = FallbackEpilogue(*plan);
  }
  if (!plan.has_value()) {
    return absl::InternalError(
        absl::StrCat("no GEMM algorithm for a dense layer of ", N, "x", IC, " -> ", OC));
  }
  if (plan->bias_kernel) {
    absl::Status s = steps.AddBias(out, bias, N, OC);
    if (!s.ok()) return s;
  }
  if (plan->gelu_kernel) {
    absl::Status s = steps.Gelu(gelu_out, out, int64_t{N} * OC);
    if (!s.ok()) return s;
  }
  return *plan;
}

absl::Status RunMatmulBackward(MatmulSteps& steps, void* dinp, void* dweight, void* dbias,
                               const void* dout, const void* inp, const void* weight, int N, int IC,
                               int OC) {
  auto gemm = [&](const RowMajorGemm& g, const void* a, const void* b, float beta,
                  void* c) -> absl::Status {
    absl::StatusOr<bool> ran =
        steps.Gemm(g, 1.0f, a, b, beta, c, Epilogue::kNone, nullptr, nullptr);
    if (!ran.ok()) return ran.status();
    if (!*ran) {
      return absl::InternalError(
          absl::StrCat("no GEMM algorithm for a ", g.m, "x", g.n, "x", g.k, " gradient"));
    }
    return absl::OkStatus();
  };
  if (dinp != nullptr) {
    absl::Status s = gemm(MatmulInputGradGemm(N, IC, OC), dout, weight, 0.0f, dinp);
    if (!s.ok()) return s;
  }
  absl::Status s = gemm(MatmulWeightGradGemm(N, IC, OC), dout, inp, 1.0f, dweight);
  if (!s.ok()) return s;
  if (dbias != nullptr) return steps.ColumnSums(dbias, dout, N, OC, /*accumulate=*/true);
  return absl::OkStatus();
}

}  // namespace ringmaster::kernels
