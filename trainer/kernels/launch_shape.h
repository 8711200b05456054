// Grid shapes of the CUDA kernels, as plain host functions so that CPU tests check them
// (launch_shape_test.cc) and the .cu files only launch.
#ifndef RINGMASTER_TRAINER_KERNELS_LAUNCH_SHAPE_H_
#define RINGMASTER_TRAINER_KERNELS_LAUNCH_SHAPE_H_

#include <cstdint>
#include <initializer_list>

namespace ringmaster::kernels {

// Threads per block of the elementwise kernels.
constexpr int kElementwiseThreads = 256;
// Largest grid of a grid-stride loop; larger inputs loop inside the kernel.
constexpr int kMaxGridStrideBlocks = 65535;

// Blocks of `threads` for a grid-stride loop over n elements: ceil(n / threads), at least 1 and
// at most kMaxGridStrideBlocks.
int GridStrideBlocks(int64_t n, int threads);

// Blocks for one warp per row, `warps_per_block` warps a block: ceil(rows / warps_per_block).
int64_t WarpPerRowBlocks(int64_t rows, int warps_per_block);

// 16-byte vectors (kernel_utils.cuh's Pack16): whether rows of `row_elements` elements of
// `element_bytes` each can be moved in them from every pointer in `rows` (null ones aside): each
// pointer 16-byte aligned, and a row a whole number of vectors, so that every row starts aligned.
bool RowsVectorizable(int64_t row_elements, int element_bytes,
                      std::initializer_list<const void*> rows);

// The vectorized one-warp-per-row kernels (LayerNorm, the causal softmax) hold a row in
// registers: each lane `chunks` vectors, lane l's k-th at vector k * 32 + l. This is the number
// of chunks a row of `row_elements` needs, rounded up to a power of two (each is a compiled
// variant): 1, 2, 4 or kMaxWarpRowChunks; 0 when the row needs more (the scalar kernels take it).
constexpr int kMaxWarpRowChunks = 8;
int WarpRowChunks(int64_t row_elements, int element_bytes);

// Row splits of a column reduction (column_sums, LayerNorm's weight gradients): the rows are
// cut into this many interleaved slices, each summed by its own blocks into a partial row of
// fp32 sums, and the partials are then added in slice order (deterministic). About 256 rows a
// slice, between 1 and kMaxColumnSplits.
constexpr int kMaxColumnSplits = 64;
int ColumnReduceSplits(int64_t rows);
// fp32 scratch elements a column reduction of `cols` columns with `splits` slices needs, per
// reduced quantity.
int64_t ColumnReduceScratch(int64_t cols, int splits);

// Blocks of the first pass of SumSquares (each writes one partial sum): enough for about 4096
// elements a block, between 1 and kMaxSumSquaresBlocks.
constexpr int kMaxSumSquaresBlocks = 1024;
int SumSquaresBlocks(int64_t n);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_LAUNCH_SHAPE_H_
