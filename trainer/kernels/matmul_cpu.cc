#include <cblas.h>

#include "trainer/kernels/gelu.h"
#include "trainer/kernels/matmul.h"

namespace ringmaster::kernels {

__attribute__((target_clones("avx512f", "avx2", "default"))) void MatmulForwardCpu(float* out, float* gelu_out, const float* inp, const float* weight,
                      const float* bias, int N, int IC, int OC) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, weight, IC, 0.0f,
              out, OC);
  if (bias != nullptr) {
    for (int i = 0; i < N; ++i) {
      float* o = out + static_cast<long>(i) * OC;
      for (int j = 0; j < OC; ++j) o[j] += bias[j];
    }
  }
  if (gelu_out != nullptr) GeluForwardCpu(gelu_out, out, static_cast<long>(N) * OC);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void MatmulBackwardCpu(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int IC, int OC) {
  if (dinp != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, weight, IC,
                0.0f, dinp, IC);
  }
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f,
              dweight, IC);
  if (dbias != nullptr) {
    for (int i = 0; i < N; ++i) {
      const float* d = dout + static_cast<long>(i) * OC;
      for (int j = 0; j < OC; ++j) dbias[j] += d[j];
    }
  }
}

}  // namespace ringmaster::kernels
