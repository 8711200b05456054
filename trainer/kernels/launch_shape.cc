#include "trainer/kernels/launch_shape.h"

#include <algorithm>

namespace ringmaster::kernels {

int GridStrideBlocks(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(std::clamp<int64_t>(blocks, 1, kMaxGridStrideBlocks));
}

int64_t WarpPerRowBlocks(int64_t rows, int warps_per_block) {
  return std::max<int64_t>(1, (rows + warps_per_block - 1) / warps_per_block);
}

int ColumnReduceSplits(int64_t rows) {
  return static_cast<int>(std::clamp<int64_t>((rows + 255) / 256, 1, kMaxColumnSplits));
}

int64_t ColumnReduceScratch(int64_t cols, int splits) { return cols * splits; }

int SumSquaresBlocks(int64_t n) {
  return static_cast<int>(std::clamp<int64_t>((n + 4095) / 4096, 1, kMaxSumSquaresBlocks));
}

}  // namespace ringmaster::kernels
