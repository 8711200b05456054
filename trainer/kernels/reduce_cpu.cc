#include <vector>

#include "trainer/kernels/reduce.h"

namespace ringmaster::kernels {

double SumSquaresCpu(const float* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

void ColumnSumsCpu(float* out, const float* in, int rows, int cols, bool accumulate) {
  std::vector<float> sums(cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* row = in + static_cast<int64_t>(r) * cols;
    for (int c = 0; c < cols; ++c) sums[c] += row[c];
  }
  for (int c = 0; c < cols; ++c) out[c] = accumulate ? out[c] + sums[c] : sums[c];
}

}  // namespace ringmaster::kernels
