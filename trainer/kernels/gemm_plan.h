// How the CUDA device expresses the model's GEMMs for cuBLAS and cuBLASLt. Pure host logic, no
// CUDA dependency, so plain CPU tests prove it (gemm_plan_test.cc).
//
//  - The model is row-major; cuBLAS is column-major. A row-major matrix X[r][c] with row stride
//    ld is, read column-major, X^T with the same ld. So the row-major product C = op(a) op(b) is
//    computed as the column-major product C^T = op(b)^T op(a)^T: cuBLAS's A is the row-major b,
//    its B is the row-major a, and m and n swap (ToColumnMajor).
//  - Dense layers (matmul.h) use three GEMMs (MatmulForwardGemm and the two gradients); the
//    forward pass can fuse its bias and GELU into cuBLASLt's epilogue (PlanMatmulEpilogue).
//  - Attention runs its per-head GEMMs as strided batches (PlanAttentionBatches).
#ifndef RINGMASTER_TRAINER_KERNELS_GEMM_PLAN_H_
#define RINGMASTER_TRAINER_KERNELS_GEMM_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>

namespace ringmaster::kernels {

// Element type of a GEMM's matrices (accumulation and alpha/beta are always fp32).
enum class ElementType { kF32, kBF16 };
inline int ElementBytes(ElementType t) { return t == ElementType::kBF16 ? 2 : 4; }

// c[m,n] = alpha * op(a) * op(b) + beta * c, all row-major; op(a) is m x k, op(b) is k x n;
// lda/ldb/ldc are row strides in elements.
struct RowMajorGemm {
  bool trans_a = false;
  bool trans_b = false;
  int m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
};

// The same product for a column-major library: C[m,n] = op(A) op(B) where A is the row-major
// problem's `b` and B its `a` (the operands swap).
struct ColumnMajorGemm {
  bool trans_a = false;
  bool trans_b = false;
  int m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
};

ColumnMajorGemm ToColumnMajor(const RowMajorGemm& g);

// True when every stride covers its matrix's rows (row-major: lda >= columns of a as stored).
bool StridesValid(const RowMajorGemm& g);

// A matrix as stored, column-major: rows x cols with leading dimension ld (cuBLASLt layouts).
struct StoredMatrix {
  int64_t rows = 0, cols = 0, ld = 0;
};
StoredMatrix StoredA(const ColumnMajorGemm& g);
StoredMatrix StoredB(const ColumnMajorGemm& g);
StoredMatrix StoredC(const ColumnMajorGemm& g);

// ---- Dense layers: inp[N,IC], weight[OC,IC], out[N,OC] (matmul.h) ----
// out = inp weight^T (a = inp, b = weight).
RowMajorGemm MatmulForwardGemm(int N, int IC, int OC);
// dinp[N,IC] = dout weight (a = dout, b = weight).
RowMajorGemm MatmulInputGradGemm(int N, int IC, int OC);
// dweight[OC,IC] (+)= dout^T inp (a = dout, b = inp).
RowMajorGemm MatmulWeightGradGemm(int N, int IC, int OC);

// cuBLASLt epilogues the forward pass uses. With GELU, the GEMM's output is GELU(x) and the
// auxiliary output holds x, the pre-activation the backward pass needs.
enum class Epilogue { kNone, kBias, kGeluAux, kGeluAuxBias };
const char* EpilogueName(Epilogue e);

struct EpiloguePlan {
  Epilogue epilogue = Epilogue::kNone;
  bool bias_kernel = false;  // add the bias with a separate kernel after the GEMM
  bool gelu_kernel = false;  // then gelu_out = GELU(out) with a separate kernel
  bool operator==(const EpiloguePlan& o) const {
    return epilogue == o.epilogue && bias_kernel == o.bias_kernel && gelu_kernel == o.gelu_kernel;
  }
};

// The epilogue of out[N,OC] = inp weight^T (+ bias) (, gelu_out = GELU(out)). The bias is fused
// when `fuse_bias`; GELU when `fuse_gelu`, the bias (if any) is fused too, and OC (the
// auxiliary matrix's leading dimension) is a multiple of 8, as cuBLASLt requires.
EpiloguePlan PlanMatmulEpilogue(bool has_bias, bool has_gelu, bool fuse_bias, bool fuse_gelu,
                                int out_cols);

// The plan to try when cuBLASLt offers no algorithm for `plan`: GELU unfused first, then the
// bias; nullopt when nothing is fused any more.
std::optional<EpiloguePlan> FallbackEpilogue(const EpiloguePlan& plan);

// Cached GEMM plans by epilogue: how many cuBLASLt has an algorithm for, and how many it has none
// for (the schedule then fuses less; a GEMM without epilogue runs through cuBLAS). Indexed by
// static_cast<int>(Epilogue).
struct GemmPlanCounts {
  int with_algorithm[4] = {};
  int without_algorithm[4] = {};
};
// For logs and benchmarks: "cuBLASLt 9 (none 6, bias 2, gelu_aux_bias 1); no algorithm 1
// (gelu_aux_bias 1)", or "no algorithm 0" when every plan has one.
std::string FormatGemmPlanCounts(const GemmPlanCounts& counts);

// The largest power of two (at most 256) dividing the address; 256 for nullptr. cuBLASLt's
// heuristic must be told how aligned each matrix is (it assumes 256 bytes otherwise).
int PointerAlignment(const void* p);

// ---- Attention: qkv[B,T,3C], att[B,NH,T,T], out[B,T,C]; head size hs = C / NH ----
// Per (batch row b, head h), row-major: Q, K, V are T x hs with row stride 3C at qkv offsets
// b*T*3C + h*hs (+ C for K, + 2C for V); the head's probabilities are T x T at
// (b*NH + h)*T*T; its output is T x hs with row stride C at b*T*C + h*hs.
struct AttentionBatches {
  int calls = 0;  // GEMM calls, each a strided batch
  int batch = 0;  // batch count of each call
  // Element offsets between consecutive calls (call_*) and batch entries (batch_*).
  int64_t call_qkv = 0, batch_qkv = 0;
  int64_t call_att = 0, batch_att = 0;
  int64_t call_out = 0, batch_out = 0;
};
// Batches over the larger of B and NH and loops over the smaller (fewer, larger calls).
AttentionBatches PlanAttentionBatches(int B, int T, int C, int NH);

// The per-head GEMMs (a, b, c as named).
RowMajorGemm AttentionScoresGemm(int T, int C, int NH);     // scores = Q K^T (a Q, b K)
RowMajorGemm AttentionOutputGemm(int T, int C, int NH);     // out = P V (a P, b V)
RowMajorGemm AttentionProbGradGemm(int T, int C, int NH);   // dP = dout V^T (a dout, b V)
RowMajorGemm AttentionValueGradGemm(int T, int C, int NH);  // dV = P^T dout (a P, b dout)
RowMajorGemm AttentionQueryGradGemm(int T, int C, int NH);  // dQ = dS K (a dS, b K)
RowMajorGemm AttentionKeyGradGemm(int T, int C, int NH);    // dK = dS^T Q (a dS, b Q)

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_GEMM_PLAN_H_
