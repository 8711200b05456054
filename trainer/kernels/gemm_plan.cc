#include "trainer/kernels/gemm_plan.h"

#include <cstdint>
#include <string>
#include <utility>

#include "common/enum_name.h"

namespace ringmaster::kernels {

// C = op(A) op(B) row-major is C^T = op(B)^T op(A)^T column-major: the operands and m, n swap.
ColumnMajorGemm ToColumnMajor(const RowMajorGemm& g) {
  return ColumnMajorGemm{g.trans_b, g.trans_a, g.n, g.m, g.k, g.ldb, g.lda, g.ldc};
}

bool StridesValid(const RowMajorGemm& g) {
  if (g.m < 0 || g.n < 0 || g.k < 0) return false;
  // Row-major a is m x k (or k x m when transposed); its row stride covers its columns.
  const int64_t a_cols = g.trans_a ? g.m : g.k;
  const int64_t b_cols = g.trans_b ? g.k : g.n;
  return g.lda >= a_cols && g.ldb >= b_cols && g.ldc >= g.n && g.lda >= 1 && g.ldb >= 1 &&
         g.ldc >= 1;
}

StoredMatrix StoredA(const ColumnMajorGemm& g) {
  return g.trans_a ? StoredMatrix{g.k, g.m, g.lda} : StoredMatrix{g.m, g.k, g.lda};
}

StoredMatrix StoredB(const ColumnMajorGemm& g) {
  return g.trans_b ? StoredMatrix{g.n, g.k, g.ldb} : StoredMatrix{g.k, g.n, g.ldb};
}

StoredMatrix StoredC(const ColumnMajorGemm& g) { return StoredMatrix{g.m, g.n, g.ldc}; }

RowMajorGemm MatmulForwardGemm(int N, int IC, int OC) {
  return RowMajorGemm{false, true, N, OC, IC, IC, IC, OC};
}

RowMajorGemm MatmulInputGradGemm(int N, int IC, int OC) {
  return RowMajorGemm{false, false, N, IC, OC, OC, IC, IC};
}

RowMajorGemm MatmulWeightGradGemm(int N, int IC, int OC) {
  return RowMajorGemm{true, false, OC, IC, N, OC, IC, IC};
}

namespace {

// "N (name n, ...)" over the non-zero entries.
std::string CountsByEpilogue(const int (&counts)[4]) {
  int total = 0;
  std::string detail;
  for (int i = 0; i < 4; ++i) {
    if (counts[i] == 0) continue;
    total += counts[i];
    if (!detail.empty()) detail += ", ";
    detail += std::string(EpilogueName(static_cast<Epilogue>(i))) + " " + std::to_string(counts[i]);
  }
  return detail.empty() ? "0" : std::to_string(total) + " (" + detail + ")";
}

}  // namespace

std::string FormatGemmPlanCounts(const GemmPlanCounts& counts) {
  return "cuBLASLt " + CountsByEpilogue(counts.with_algorithm) + "; no algorithm " +
         CountsByEpilogue(counts.without_algorithm);
}

const char* EpilogueName(Epilogue e) {
  static constexpr std::pair<Epilogue, const char*> kNames[] = {
      {Epilogue::kNone, "none"},
      {Epilogue::kBias, "bias"},
      {Epilogue::kGeluAux, "gelu_aux"},
      {Epilogue::kGeluAuxBias, "gelu_aux_bias"}};
  return EnumName(kNames, e, "?");
}

EpiloguePlan PlanMatmulEpilogue(bool has_bias, bool has_gelu, bool fuse_bias, bool fuse_gelu,
                                int out_cols) {
  EpiloguePlan plan;
  const bool bias_fused = has_bias && fuse_bias;
  plan.bias_kernel = has_bias && !bias_fused;
  // GELU must follow the bias, so it is fused only if the bias is (or there is none).
  const bool gelu_fused = has_gelu && fuse_gelu && (bias_fused || !has_bias) && out_cols % 8 == 0;
  plan.gelu_kernel = has_gelu && !gelu_fused;
  if (gelu_fused) {
    plan.epilogue = has_bias ? Epilogue::kGeluAuxBias : Epilogue::kGeluAux;
  } else if (bias_fused) {
    plan.epilogue = Epilogue::kBias;
  }
  return plan;
}

std::optional<EpiloguePlan> FallbackEpilogue(const EpiloguePlan& plan) {
  EpiloguePlan next = plan;
  switch (plan.epilogue) {
    case Epilogue::kNone:
      return std::nullopt;
    case Epilogue::kBias:
      next.epilogue = Epilogue::kNone;
      next.bias_kernel = true;
      return next;
    case Epilogue::kGeluAux:
      next.epilogue = Epilogue::kNone;
      next.gelu_kernel = true;
      return next;
    case Epilogue::kGeluAuxBias:
      next.epilogue = Epilogue::kBias;
      next.gelu_kernel = true;
      return next;
  }
  return std::nullopt;
}

int PointerAlignment(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  if (address == 0) return 256;
  int alignment = 1;
  while (alignment < 256 && address % (2 * alignment) == 0) alignment *= 2;
  return alignment;
}

AttentionBatches PlanAttentionBatches(int B, int T, int C, int NH) {
  const int hs = C / NH;
  // Per batch row b and per head h.
  const int64_t b_qkv = int64_t{T} * 3 * C, h_qkv = hs;
  const int64_t b_att = int64_t{NH} * T * T, h_att = int64_t{T} * T;
  const int64_t b_out = int64_t{T} * C, h_out = hs;
  AttentionBatches p;
  if (NH >= B) {  // loop over b, batch the heads
    p.calls = B;
    p.batch = NH;
    p.call_qkv = b_qkv, p.batch_qkv = h_qkv;
    p.call_att = b_att, p.batch_att = h_att;
    p.call_out = b_out, p.batch_out = h_out;
  } else {  // loop over h, batch the rows
    p.calls = NH;
    p.batch = B;
    p.call_qkv = h_qkv, p.batch_qkv = b_qkv;
    p.call_att = h_att, p.batch_att = b_att;
    p.call_out = h_out, p.batch_out = b_out;
  }
  return p;
}

RowMajorGemm AttentionScoresGemm(int T, int C, int NH) {
  return RowMajorGemm{false, true, T, T, C / NH, 3LL * C, 3LL * C, T};
}
RowMajorGemm AttentionOutputGemm(int T, int C, int NH) {
  return RowMajorGemm{false, false, T, C / NH, T, T, 3LL * C, C};
}
RowMajorGemm AttentionProbGradGemm(int T, int C, int NH) {
  return RowMajorGemm{false, true, T, T, C / NH, C, 3LL * C, T};
}
RowMajorGemm AttentionValueGradGemm(int T, int C, int NH) {
  return RowMajorGemm{true, false, T, C / NH, T, T, C, 3LL * C};
}
RowMajorGemm AttentionQueryGradGemm(int T, int C, int NH) {
  return RowMajorGemm{false, false, T, C / NH, T, T, 3LL * C, 3LL * C};
}
RowMajorGemm AttentionKeyGradGemm(int T, int C, int NH) {
  return RowMajorGemm{true, false, T, C / NH, T, T, 3LL * C, 3LL * C};
}

}  // namespace ringmaster::kernels
