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

bool RowsVectorizable(int64_t row_elements, int element_bytes,
                      std::initializer_list<const void*> rows) {
  if ((row_elements * element_bytes) % 16 != 0) return false;
  return std::all_of(rows.begin(), rows.end(),
                     [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; });
}

int WarpRowChunks(int64_t row_elements, int element_bytes) {
  const int64_t per_vector = 16 / element_bytes;
  const int64_t needed = (row_elements + 32 * per_vector - 1) / (32 * per_vector);
  for (int chunks = 1; chunks <= kMaxWarpRowChunks; chunks *= 2) {
    if (needed <= chunks) return chunks;
  }
  return 0;
}

int ColumnReduceSplits(int64_t rows) {
  return static_cast<int>(std::clamp<int64_t>((rows + 255) / 256, 1, kMaxColumnSplits));
}

int64_t ColumnReduceScratch(int64_t cols, int splits) { return cols * splits; }

int SumSquaresBlocks(int64_t n) {
  return static_cast<int>(std::clamp<int64_t>((n + 4095) / 4096, 1, kMaxSumSquaresBlocks));
}

}  // namespace ringmaster::kernels
