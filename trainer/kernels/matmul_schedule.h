// The order of operations of a dense layer (matmul.h) on a GEMM library with epilogues: which
// GEMMs run, which epilogue is tried first and what replaces it when the library offers no
// algorithm for it, and the separate kernels that make up for what was not fused.
//
// The steps are an interface so that the same schedule drives the CUDA implementation
// (matmul_cuda.h: cuBLASLt and CUDA kernels) and a CPU implementation in the tests
// (matmul_schedule_test.cc), which checks it against the CPU reference, fallbacks included.
// Pointers are opaque (device memory on the GPU); the steps know their element type.
#ifndef RINGMASTER_TRAINER_KERNELS_MATMUL_SCHEDULE_H_
#define RINGMASTER_TRAINER_KERNELS_MATMUL_SCHEDULE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/kernels/gemm_plan.h"

namespace ringmaster::kernels {

class MatmulSteps {
 public:
  virtual ~MatmulSteps() = default;
  // c = alpha op(a) op(b) + beta c (row-major `g`), then the epilogue: kBias adds bias[j] to
  // column j of every row of c; kGeluAux(Bias) writes the result (+ bias) to `aux` and its GELU
  // to c (beta must then be 0). Returns false, having done nothing, when the library has no
  // algorithm for this epilogue and these operands.
  virtual absl::StatusOr<bool> Gemm(const RowMajorGemm& g, float alpha, const void* a,
                                    const void* b, float beta, void* c, Epilogue epilogue,
                                    const void* bias, void* aux) = 0;
  // out[r, c] += bias[c].
  virtual absl::Status AddBias(void* out, const void* bias, int rows, int cols) = 0;
  // out[i] = GELU(in[i]) (tanh approximation).
  virtual absl::Status Gelu(void* out, const void* in, int64_t n) = 0;
  // out[c] (+)= sum over rows of in[r, c].
  virtual absl::Status ColumnSums(void* out, const void* in, int rows, int cols,
                                  bool accumulate) = 0;
};

struct MatmulFusion {
  bool bias = true;  // may use the bias epilogue
  bool gelu = true;  // may use the GELU epilogue
};

// out[N,OC] = inp[N,IC] weight[OC,IC]^T (+ bias when not null); with gelu_out not null also
// gelu_out = GELU(out), out keeping the pre-activation. Overwrites. Returns the plan that ran.
absl::StatusOr<EpiloguePlan> RunMatmulForward(MatmulSteps& steps, MatmulFusion fusion, void* out,
                                              void* gelu_out, const void* inp, const void* weight,
                                              const void* bias, int N, int IC, int OC);

// dinp = dout weight (overwrites; skipped when null); dweight += dout^T inp;
// dbias += column sums of dout (skipped when null).
absl::Status RunMatmulBackward(MatmulSteps& steps, void* dinp, void* dweight, void* dbias,
                               const void* dout, const void* inp, const void* weight, int N, int IC,
                               int OC);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_MATMUL_SCHEDULE_H_
