#include "trainer/kernels/elementwise.h"

namespace ringmaster::kernels {

void AddCpu(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void ScaleCpu(float* x, float factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

void AddBiasCpu(float* out, const float* bias, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    float* o = out + static_cast<int64_t>(r) * cols;
    for (int c = 0; c < cols; ++c) o[c] += bias[c];
  }
}

}  // namespace ringmaster::kernels
