#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "trainer/kernels/flash_attention_launch.h"
#include "trainer/kernels/kernel_utils.cuh"
#include "trainer/kernels/tensor_core.cuh"

namespace ringmaster::kernels {
namespace {

using bf16 = __nv_bfloat16;
using device::AccColumn;
using device::AccRow;
using device::Mma;
using device::MmaA;
using device::MmaB;
using device::MmaC;

// A block is four warps over a tile of 64 rows (queries for the forward and dQ, keys for dK and
// dV), 16 rows a warp, and walks the other side's tiles of 64. The products run on the tensor
// cores from registers (tensor_core.cuh): a warp's [16, 64] scores are kScoreTiles accumulators,
// whose elements the softmax works on where they are and which become the next product's A
// operand without leaving registers. Only the tiles the warps share (the other side's rows) go
// through shared memory.
constexpr int kTile = 64;
constexpr int kWarps = kTile / 16;
constexpr int kThreads = kWarps * 32;
constexpr int kScoreTiles = kTile / 8;   // accumulators of a [16, 64] product
constexpr int kScoreSteps = kTile / 16;  // A operands of a [16, 64] left factor

template <int kD>
struct Head {
  // Whole ldmatrix.x4 loads of 32 channels; at most 64, since the double-buffered tiles are
  // static shared memory (48 KiB at most: 36 KiB at 64).
  static_assert(kD % 32 == 0 && kD <= 64, "heads of 32 or 64 channels");
  // A [64, kD] bf16 tile's row in shared memory, padded by 16 bytes: the 8 rows an ldmatrix
  // reads at once fall in distinct banks.
  static constexpr int kLd = kD + 8;
  static constexpr int kSteps = kD / 16;    // A operands of a warp's [16, kD] rows
  static constexpr int kOutTiles = kD / 8;  // accumulators of a [16, kD] product
};

// Starts copying rows row0 .. row0 + 63 of a [T, kD] slice (rows `stride` elements apart) into
// a shared [64, kD + 8] tile, rows from T on as zeros (kernel_utils.cuh's CopyPackAsync: the
// caller commits and waits). All threads of the block take part.
template <int kD>
__device__ void CopyTile(bf16* tile, const bf16* src, int64_t stride, int row0, int T) {
  constexpr int kPacks = kD / 8;
  for (int i = threadIdx.x; i < kTile * kPacks; i += kThreads) {
    const int r = i / kPacks, c = (i % kPacks) * 8;
    const bool past = row0 + r >= T;
    device::CopyPackAsync(tile + r * Head<kD>::kLd + c, past ? src : src + (row0 + r) * stride + c,
                          past);
  }
}

// The tile loops' double buffering: a kernel starts copying its first tiles (CopyTile) and waits
// for them with AwaitAllTiles; then each iteration, after a __syncthreads (nobody reads the
// other buffers any more), starts copying the next tile into them, if any, and waits for the
// current one with AwaitCurrentTile. Every thread of the block calls both.
__device__ __forceinline__ void AwaitAllTiles() {
  device::CommitCopies();
  device::WaitCopies<0>();
  __syncthreads();  // every thread's copies, seen by the block
}

// Closes the group of the next tile's copies (empty on the last iteration) and waits for the
// rest: the current tile's.
__device__ __forceinline__ void AwaitCurrentTile() {
  device::CommitCopies();
  device::WaitCopies<1>();
  __syncthreads();
}

// The warp's 16 rows of a shared tile (from row `first`) as A operands over the channels.
template <int kD>
__device__ void LoadRows(MmaA (&rows)[Head<kD>::kSteps], const bf16* tile, int first) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int d = 0; d < Head<kD>::kSteps; ++d) {
    // Matrices: rows 0-7 and 8-15 of channels 16d .. 16d + 7, then of 16d + 8 ...
    device::LoadMatrices<false>(
        rows[d].r, tile + (first + lane % 16) * Head<kD>::kLd + d * 16 + lane / 16 * 8);
  }
}

// scores [16, 64] = rows [16, kD] x tile [64, kD]^T.
template <int kD>
__device__ void RowsTimesTileT(MmaC (&scores)[kScoreTiles], const MmaA (&rows)[Head<kD>::kSteps],
                               const bf16* tile) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < kScoreTiles; ++n) {
    scores[n] = MmaC{};
#pragma unroll
    for (int d = 0; d < Head<kD>::kSteps; d += 2) {
      // Matrix j: tile rows 8n .. 8n + 7 (the product's columns), channels 16d + 8j ..: the B
      // operands of channel steps d and d + 1.
      uint32_t b[4];
      device::LoadMatrices<false>(
          b, tile + (n * 8 + lane % 8) * Head<kD>::kLd + d * 16 + lane / 8 * 8);
      Mma(scores[n], rows[d], MmaB{{b[0], b[1]}});
      Mma(scores[n], rows[d + 1], MmaB{{b[2], b[3]}});
    }
  }
}

// acc [16, kD] += p [16, 64] x tile [64, kD], p as A operands (AsOperands).
template <int kD>
__device__ void Accumulate(MmaC (&acc)[Head<kD>::kOutTiles], const MmaA (&p)[kScoreSteps],
                           const bf16* tile) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kScoreSteps; ++j) {
#pragma unroll
    for (int n = 0; n < Head<kD>::kOutTiles; n += 2) {
      // Matrix m, transposed: tile rows 16j + 8(m % 2) .., channels 8(n + m / 2) ..: the B
      // operands of output tiles n and n + 1 over rows 16j .. 16j + 15.
      const int m = lane / 8;
      uint32_t b[4];
      device::LoadMatrices<true>(
          b, tile + (16 * j + m % 2 * 8 + lane % 8) * Head<kD>::kLd + (n + m / 2) * 8);
      Mma(acc[n], p[j], MmaB{{b[0], b[1]}});
      Mma(acc[n + 1], p[j], MmaB{{b[2], b[3]}});
    }
  }
}

// A [16, 64] product's values as the A operands of the next product (rounded to bf16).
__device__ void AsOperands(MmaA (&a)[kScoreSteps], const MmaC (&values)[kScoreTiles]) {
#pragma unroll
  for (int j = 0; j < kScoreSteps; ++j)
    a[j] = device::AccumulatorsAsA(values[2 * j], values[2 * j + 1]);
}

// Writes acc * scale ([16, kD]) to the rows of `dst` (row `first_row + r` at dst + row * stride)
// before T, two channels a store.
template <int kD>
__device__ void WriteRows(bf16* dst, int64_t stride, int first_row, int T,
                          const MmaC (&acc)[Head<kD>::kOutTiles], float scale) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = first_row + AccRow(lane, 2 * half);
    if (row >= T) continue;
#pragma unroll
    for (int n = 0; n < Head<kD>::kOutTiles; ++n) {
      *reinterpret_cast<uint32_t*>(dst + row * stride + 8 * n + AccColumn(lane, 0)) =
          device::PackBf16x2(acc[n].c[2 * half] * scale, acc[n].c[2 * half + 1] * scale);
    }
  }
}

// Over the 4 lanes that hold a row of an accumulator.
__device__ __forceinline__ float RowMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float RowSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

struct Problem {
  int T, C, NH;
  float scale, scale_log2;  // 1/sqrt(hs), and times log2(e)
};

// Where a thread of one of the three tiled kernels works: the block's batch row b and head h
// (blockIdx.x = b * NH + h), the thread's warp and lane, and the head's queries in qkv (its keys
// at q + C, its values at q + 2C, rows `stride` apart).
struct Place {
  int bh, b, h, warp, lane;
  int64_t stride;
  const bf16* q;
};

template <int kD>
__device__ Place PlaceOf(const bf16* qkv, const Problem& pr) {
  const int bh = blockIdx.x, b = bh / pr.NH, h = bh % pr.NH;
  const int64_t stride = 3 * int64_t{pr.C};
  return Place{bh,
               b,
               h,
               static_cast<int>(threadIdx.x / 32),
               static_cast<int>(threadIdx.x % 32),
               stride,
               qkv + int64_t{b} * pr.T * stride + h * kD};
}

// Grid (B * NH, query tiles), the longest rows' tiles first.
template <int kD>
__global__ void __launch_bounds__(kThreads)
    ForwardKernel(bf16* out, float* lse, const bf16* qkv, Problem pr) {
  using H = Head<kD>;
  // Two buffers of each: the next tile is copied in while this one is worked on.
  __shared__ __align__(16) bf16 keys[2][kTile * H::kLd];
  __shared__ __align__(16) bf16 values[2][kTile * H::kLd];
  const auto [bh, b, h, warp, lane, stride, q] = PlaceOf<kD>(qkv, pr);
  const int qt = gridDim.y - 1 - blockIdx.y;
  const int first = qt * kTile + warp * 16;  // the warp's first query

  CopyTile<kD>(keys[1], q, stride, qt * kTile, pr.T);  // the queries, through a key buffer
  CopyTile<kD>(keys[0], q + pr.C, stride, 0, pr.T);
  CopyTile<kD>(values[0], q + 2 * pr.C, stride, 0, pr.T);
  AwaitAllTiles();
  MmaA qa[H::kSteps];
  LoadRows<kD>(qa, keys[1], warp * 16);

  // Online softmax in the log2 domain, per row (the lane's rows AccRow(lane, 0) and + 8): the
  // running maximum, and this lane's part of the row's sum (the 4 lanes' are added at the end).
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
  MmaC o[H::kOutTiles] = {};
  for (int kt = 0; kt <= qt; ++kt) {
    const int cur = kt % 2;
    __syncthreads();  // every warp is done with the other buffers (the previous tile, the queries)
    if (kt < qt) {
      CopyTile<kD>(keys[1 - cur], q + pr.C, stride, (kt + 1) * kTile, pr.T);
      CopyTile<kD>(values[1 - cur], q + 2 * pr.C, stride, (kt + 1) * kTile, pr.T);
    }
    AwaitCurrentTile();
    MmaC s[kScoreTiles];
    RowsTimesTileT<kD>(s, qa, keys[cur]);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        // Keys after the query masked (only the diagonal tile has any).
        const bool future = kt == qt && n * 8 + AccColumn(lane, i) > warp * 16 + AccRow(lane, i);
        s[n].c[i] = future ? -INFINITY : s[n].c[i] * pr.scale_log2;
        tile_max[i / 2] = fmaxf(tile_max[i / 2], s[n].c[i]);
      }
    }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], RowMax(tile_max[r]));  // finite: key 0 is in tile 0
      alpha[r] = exp2f(m[r] - m_new);                        // 0 on the first tile
      m[r] = m_new;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[n].c[i] = exp2f(s[n].c[i] - m[i / 2]);
        l[i / 2] += s[n].c[i];
      }
    }
    // O = O * alpha + P V.
#pragma unroll
    for (int n = 0; n < H::kOutTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[n].c[i] *= alpha[i / 2];
    }
    MmaA p[kScoreSteps];
    AsOperands(p, s);
    Accumulate<kD>(o, p, values[cur]);
  }
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = RowSum(l[r]);
    inv[r] = 1.0f / l[r];
  }
#pragma unroll
  for (int n = 0; n < H::kOutTiles; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o[n].c[i] *= inv[i / 2];
  }
  WriteRows<kD>(out + int64_t{b} * pr.T * pr.C + h * kD, pr.C, first, pr.T, o, 1.0f);
  if (lane % 4 != 0) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int query = first + AccRow(lane, 2 * r);
    if (query < pr.T) lse[int64_t{bh} * pr.T + query] = m[r] + log2f(l[r]);
  }
}

// delta[b, h, t] = dot(dout, out) over the head's channels: one thread per row.
template <int kD>
__global__ void DeltaKernel(float* delta, const bf16* dout, const bf16* out, int B, Problem pr) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= int64_t{B} * pr.NH * pr.T) return;
  const int64_t bh = i / pr.T;
  const int64_t at = (bh / pr.NH * pr.T + i % pr.T) * pr.C + bh % pr.NH * kD;
  float sum = 0;
#pragma unroll
  for (int c = 0; c < kD; c += 8) {
    const Pack16<bf16> a = LoadPack(dout + at + c), b = LoadPack(out + at + c);
#pragma unroll
    for (int e = 0; e < 8; ++e) sum += a.Get(e) * b.Get(e);
  }
  delta[i] = sum;
}

// Entry threadIdx.x (< 64) of a query tile of a row of T values, or `past` beyond T.
__device__ __forceinline__ float TileEntry(const float* row, int tile, int T, float past) {
  const int t = tile * kTile + static_cast<int>(threadIdx.x);
  return t < T ? row[t] : past;
}

// dK and dV. Grid (B * NH, key tiles): each block walks the query tiles from its own on. The
// warp's rows are keys, so its products are transposed ones: P^T, dP^T and dS^T.
template <int kD>
__global__ void __launch_bounds__(kThreads)
    KeysBackwardKernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                       const float* delta, Problem pr) {
  using H = Head<kD>;
  // Two buffers of each: the next query tile is copied in while this one is worked on.
  __shared__ __align__(16) bf16 queries[2][kTile * H::kLd];
  __shared__ __align__(16) bf16 grads[2][kTile * H::kLd];  // dout rows
  __shared__ float lse_tile[2][kTile], delta_tile[2][kTile];
  const auto [bh, b, h, warp, lane, stride, q] = PlaceOf<kD>(qkv, pr);
  const int kt = blockIdx.y, tiles = gridDim.y;
  const bf16* dO = dout + int64_t{b} * pr.T * pr.C + h * kD;
  const int first = kt * kTile + warp * 16;  // the warp's first key
  const float* const lse_bh = lse + int64_t{bh} * pr.T;  // past T: P = 0
  const float* const delta_bh = delta + int64_t{bh} * pr.T;
  CopyTile<kD>(queries[1], q + pr.C, stride, kt * kTile, pr.T);  // the keys and values first
  CopyTile<kD>(grads[1], q + 2 * pr.C, stride, kt * kTile, pr.T);
  CopyTile<kD>(queries[0], q, stride, kt * kTile, pr.T);
  CopyTile<kD>(grads[0], dO, pr.C, kt * kTile, pr.T);
  if (threadIdx.x < kTile) {
    lse_tile[0][threadIdx.x] = TileEntry(lse_bh, kt, pr.T, INFINITY);
    delta_tile[0][threadIdx.x] = TileEntry(delta_bh, kt, pr.T, 0.0f);
  }
  AwaitAllTiles();
  MmaA ka[H::kSteps], va[H::kSteps];
  LoadRows<kD>(ka, queries[1], warp * 16);
  LoadRows<kD>(va, grads[1], warp * 16);
  MmaC dk[H::kOutTiles] = {}, dv[H::kOutTiles] = {};
  for (int qt = kt; qt < tiles; ++qt) {
    const int cur = (qt - kt) % 2;
    const bool more = qt + 1 < tiles;
    float next_lse = 0, next_delta = 0;  // stored once this tile's work has hidden the reads
    __syncthreads();  // every warp is done with the other buffers (the previous tile, K and V)
    if (more) {
      CopyTile<kD>(queries[1 - cur], q, stride, (qt + 1) * kTile, pr.T);
      CopyTile<kD>(grads[1 - cur], dO, pr.C, (qt + 1) * kTile, pr.T);
      if (threadIdx.x < kTile) {
        next_lse = TileEntry(lse_bh, qt + 1, pr.T, INFINITY);
        next_delta = TileEntry(delta_bh, qt + 1, pr.T, 0.0f);
      }
    }
    AwaitCurrentTile();
    const bf16* const qs = queries[cur];
    const bf16* const gs = grads[cur];
    const float* const lse_row = lse_tile[cur];
    const float* const delta_row = delta_tile[cur];
    // P^T (the warp's keys by the tile's queries), recomputed from the scores.
    MmaC p[kScoreTiles];
    RowsTimesTileT<kD>(p, ka, qs);
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = n * 8 + AccColumn(lane, i);
        const bool causal = qt * kTile + col >= first + AccRow(lane, i);
        p[n].c[i] = causal ? exp2f(p[n].c[i] * pr.scale_log2 - lse_row[col]) : 0.0f;
      }
    }
    MmaA operands[kScoreSteps];
    AsOperands(operands, p);
    Accumulate<kD>(dv, operands, gs);  // dV += P^T dout
    MmaC dp[kScoreTiles];
    RowsTimesTileT<kD>(dp, va, gs);  // dP^T = V dout^T
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        p[n].c[i] *= dp[n].c[i] - delta_row[n * 8 + AccColumn(lane, i)];  // dS^T
      }
    }
    AsOperands(operands, p);
    Accumulate<kD>(dk, operands, qs);   // dK += dS^T Q
    if (more && threadIdx.x < kTile) {  // read at the next iteration's barrier
      lse_tile[1 - cur][threadIdx.x] = next_lse;
      delta_tile[1 - cur][threadIdx.x] = next_delta;
    }
  }
  bf16* dst = dqkv + int64_t{b} * pr.T * stride + h * kD;
  WriteRows<kD>(dst + pr.C, stride, first, pr.T, dk, pr.scale);
  WriteRows<kD>(dst + 2 * pr.C, stride, first, pr.T, dv, 1.0f);
}

// dQ. Grid (B * NH, query tiles), the longest rows' tiles first: each block walks the key
// tiles up to its own.
template <int kD>
__global__ void __launch_bounds__(kThreads)
    QueriesBackwardKernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                          const float* delta, Problem pr) {
  using H = Head<kD>;
  // Two buffers of each: the next key tile is copied in while this one is worked on.
  __shared__ __align__(16) bf16 keys[2][kTile * H::kLd];
  __shared__ __align__(16) bf16 values[2][kTile * H::kLd];
  const auto [bh, b, h, warp, lane, stride, q] = PlaceOf<kD>(qkv, pr);
  const int qt = gridDim.y - 1 - blockIdx.y;
  const int first = qt * kTile + warp * 16;  // the warp's first query
  // The lane's two rows; rows past T: any finite values (their results are not written).
  float row_lse[2], row_delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int query = first + AccRow(lane, 2 * r);
    row_lse[r] = query < pr.T ? lse[int64_t{bh} * pr.T + query] : 0.0f;
    row_delta[r] = query < pr.T ? delta[int64_t{bh} * pr.T + query] : 0.0f;
  }

  // The queries and their output gradients, through the second buffers.
  CopyTile<kD>(keys[1], q, stride, qt * kTile, pr.T);
  CopyTile<kD>(values[1], dout + int64_t{b} * pr.T * pr.C + h * kD, pr.C, qt * kTile, pr.T);
  CopyTile<kD>(keys[0], q + pr.C, stride, 0, pr.T);
  CopyTile<kD>(values[0], q + 2 * pr.C, stride, 0, pr.T);
  AwaitAllTiles();
  MmaA qa[H::kSteps], ga[H::kSteps];
  LoadRows<kD>(qa, keys[1], warp * 16);
  LoadRows<kD>(ga, values[1], warp * 16);
  MmaC dq[H::kOutTiles] = {};
  for (int kt = 0; kt <= qt; ++kt) {
    const int cur = kt % 2;
    __syncthreads();  // every warp is done with the other buffers (the previous tile, Q, dout)
    if (kt < qt) {
      CopyTile<kD>(keys[1 - cur], q + pr.C, stride, (kt + 1) * kTile, pr.T);
      CopyTile<kD>(values[1 - cur], q + 2 * pr.C, stride, (kt + 1) * kTile, pr.T);
    }
    AwaitCurrentTile();
    MmaC p[kScoreTiles], dp[kScoreTiles];
    RowsTimesTileT<kD>(p, qa, keys[cur]);
    RowsTimesTileT<kD>(dp, ga, values[cur]);  // dP = dout V^T
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bool causal = kt * kTile + n * 8 + AccColumn(lane, i) <= first + AccRow(lane, i);
        const float prob = causal ? exp2f(p[n].c[i] * pr.scale_log2 - row_lse[i / 2]) : 0.0f;
        p[n].c[i] = prob * (dp[n].c[i] - row_delta[i / 2]);  // dS
      }
    }
    MmaA operands[kScoreSteps];
    AsOperands(operands, p);
    Accumulate<kD>(dq, operands, keys[cur]);  // dQ += dS K
  }
  WriteRows<kD>(dqkv + int64_t{b} * pr.T * stride + h * kD, stride, first, pr.T, dq, pr.scale);
}

// The head size's kernels: f(std::integral_constant<int, kD>{}); false when none.
template <typename F>
bool WithHead(int C, int NH, F&& f) {
  if (NH <= 0 || C % NH != 0) return false;
  switch (C / NH) {
    case 32:
      f(std::integral_constant<int, 32>{});
      return true;
    case 64:
      f(std::integral_constant<int, 64>{});
      return true;
    default:
      return false;
  }
}

Problem MakeProblem(int T, int C, int NH) {
  const float scale = 1.0f / sqrtf(static_cast<float>(C / NH));
  return Problem{T, C, NH, scale, scale * 1.4426950408889634f};
}

// The grid fits (a dim3's y, and the delta kernel's blocks an int's x), the bf16 tensors' rows
// (C or 3C elements) move in 16-byte vectors, and the fp32 tensors are 4-byte aligned.
bool Launchable(int B, int T, int C, int NH, std::initializer_list<const void*> bf16_tensors,
                std::initializer_list<const void*> fp32_tensors) {
  if ((T + kTile - 1) / kTile > 65535 || int64_t{B} * NH * T / 256 >= (int64_t{1} << 31)) {
    return false;
  }
  if (!RowsVectorizable(C, sizeof(bf16), bf16_tensors)) return false;
  for (const void* p : fp32_tensors) {
    if (p == nullptr || reinterpret_cast<uintptr_t>(p) % 4 != 0) return false;
  }
  return true;
}

}  // namespace

bool FlashAttentionSupports(int C, int NH) {
  return WithHead(C, NH, [](auto) {});
}

cudaError_t LaunchFlashAttentionForward(bf16* out, float* lse, const bf16* qkv, int B, int T,
                                        int C, int NH, cudaStream_t stream) {
  ClearStaleError();
  if (B <= 0 || T <= 0) return cudaSuccess;  // nothing to compute
  if (!Launchable(B, T, C, NH, {out, qkv}, {lse})) return cudaErrorInvalidValue;
  const dim3 grid(B * NH, (T + kTile - 1) / kTile);
  if (!WithHead(C, NH, [&](auto d) {
        constexpr int kD = decltype(d)::value;
        ForwardKernel<kD><<<grid, kThreads, 0, stream>>>(out, lse, qkv, MakeProblem(T, C, NH));
      })) {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchFlashAttentionBackward(bf16* dqkv, float* delta, const bf16* dout,
                                         const bf16* out, const bf16* qkv, const float* lse, int B,
                                         int T, int C, int NH, cudaStream_t stream) {
  ClearStaleError();
  if (B <= 0 || T <= 0) return cudaSuccess;
  if (!Launchable(B, T, C, NH, {dqkv, dout, out, qkv}, {delta, lse})) return cudaErrorInvalidValue;
  const dim3 grid(B * NH, (T + kTile - 1) / kTile);
  const int64_t rows = int64_t{B} * NH * T;
  const Problem pr = MakeProblem(T, C, NH);
  if (!WithHead(C, NH, [&](auto d) {
        constexpr int kD = decltype(d)::value;
        const int64_t blocks = (rows + 255) / 256;  // below 2^31 (Launchable)
        DeltaKernel<kD><<<blocks, 256, 0, stream>>>(delta, dout, out, B, pr);
        KeysBackwardKernel<kD><<<grid, kThreads, 0, stream>>>(dqkv, dout, qkv, lse, delta, pr);
        QueriesBackwardKernel<kD><<<grid, kThreads, 0, stream>>>(dqkv, dout, qkv, lse, delta, pr);
      })) {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace ringmaster::kernels
