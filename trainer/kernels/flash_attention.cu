#include <mma.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "trainer/kernels/flash_attention_launch.h"
#include "trainer/kernels/kernel_utils.cuh"

namespace ringmaster::kernels {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;
using device::LoadPack;
using device::Pack16;
using device::StorePack;

// A block is four warps; each warp owns 16 rows (one wmma tile) of the block's 64 query rows
// (forward, dQ) or key rows (dK, dV), and within its rows lane l works on row l / 2: on the score
// columns of parity l % 2 (ScoreColumn: interleaved, so that a warp's shared-memory accesses
// fall in twice as many banks), and on half l % 2 of the output channels.
constexpr int kTile = 64;
constexpr int kWarps = kTile / 16;
constexpr int kThreads = kWarps * 32;
constexpr int kHalfTile = kTile / 2;
// Leading dimensions in shared memory, padded against bank conflicts and kept to wmma's rules
// (multiples of 16 bytes, every 16-row slice 32-byte aligned): a warp's fp32 score tile, its bf16
// probabilities, and the bf16 score gradients written over the fp32 scores in place.
constexpr int kScoreLd = kTile + 4;
constexpr int kProbLd = kTile + 8;
constexpr int kGradLd = 2 * kScoreLd;

// The lane's c-th score column (of kHalfTile) in its row.
__device__ __forceinline__ int ScoreColumn(int c, int half) { return 2 * c + half; }

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBT = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

template <int kD>
struct Head {
  static_assert(kD % 16 == 0 && kD <= kTile, "a head is whole wmma tiles, at most a score tile");
  static constexpr int kLd = kD + 8;  // a [64, kD] bf16 tile's row in shared memory
  static constexpr int kSteps = kD / 16;
  static constexpr int kHalf = kD / 2;  // channels a lane writes
};

// Rows row0 .. row0 + 63 of a [T, kD] slice (rows `stride` elements apart) into a shared
// [64, kD + 8] tile, rows from T on as zeros. All threads of the block take part.
template <int kD>
__device__ void LoadTile(bf16* tile, const bf16* src, int64_t stride, int row0, int T) {
  constexpr int kPacks = kD / 8;
  for (int i = threadIdx.x; i < kTile * kPacks; i += kThreads) {
    const int r = i / kPacks, c = (i % kPacks) * 8;
    Pack16<bf16> p;
    if (row0 + r < T) {
      p = LoadPack(src + (row0 + r) * stride + c);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) p.Set(e, 0.0f);
    }
    StorePack(tile + r * Head<kD>::kLd + c, p);
  }
}

// The warp's rows (16 of the tile's, from `first`) as kSteps matrix_a operands.
template <int kD>
__device__ void LoadRows(FragA (&frag)[Head<kD>::kSteps], const bf16* tile, int first) {
#pragma unroll
  for (int d = 0; d < Head<kD>::kSteps; ++d) {
    wmma::load_matrix_sync(frag[d], tile + first * Head<kD>::kLd + d * 16, Head<kD>::kLd);
  }
}

// scores [16, 64] (fp32, kScoreLd) = rows [16, kD] x tile[64, kD]^T.
template <int kD>
__device__ void RowsTimesTileT(float* scores, const FragA (&rows)[Head<kD>::kSteps],
                               const bf16* tile) {
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int d = 0; d < Head<kD>::kSteps; ++d) {
      FragBT b;
      wmma::load_matrix_sync(b, tile + n * 16 * Head<kD>::kLd + d * 16, Head<kD>::kLd);
      wmma::mma_sync(acc, rows[d], b, acc);
    }
    wmma::store_matrix_sync(scores + n * 16, acc, kScoreLd, wmma::mem_row_major);
  }
}

// acc[kSteps] ([16, kD]) += a [16, 64] (bf16, lda) x tile [64, kD].
template <int kD>
__device__ void Accumulate(FragC (&acc)[Head<kD>::kSteps], const bf16* a, int lda,
                           const bf16* tile) {
#pragma unroll
  for (int j = 0; j < kTile / 16; ++j) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + j * 16, lda);
#pragma unroll
    for (int n = 0; n < Head<kD>::kSteps; ++n) {
      FragB b;
      wmma::load_matrix_sync(b, tile + j * 16 * Head<kD>::kLd + n * 16, Head<kD>::kLd);
      wmma::mma_sync(acc[n], fa, b, acc[n]);
    }
  }
}

// Writes acc * scale ([16, kD]) to rows of `dst` (row `first_row + r` at dst + row * stride),
// those before T, through the warp's score buffer.
template <int kD>
__device__ void WriteRows(bf16* dst, int64_t stride, int first_row, int T,
                          FragC (&acc)[Head<kD>::kSteps], float scale, float* scores) {
  __syncwarp();
#pragma unroll
  for (int n = 0; n < Head<kD>::kSteps; ++n) {
    for (int i = 0; i < acc[n].num_elements; ++i) acc[n].x[i] *= scale;
    wmma::store_matrix_sync(scores + n * 16, acc[n], kScoreLd, wmma::mem_row_major);
  }
  __syncwarp();
  const int lane = threadIdx.x % 32, row = lane / 2, c0 = (lane % 2) * Head<kD>::kHalf;
  if (first_row + row < T) {
    bf16* out = dst + (first_row + row) * stride + c0;
#pragma unroll
    for (int c = 0; c < Head<kD>::kHalf; c += 8) {
      Pack16<bf16> p;
#pragma unroll
      for (int e = 0; e < 8; ++e) p.Set(e, scores[row * kScoreLd + c0 + c + e]);
      StorePack(out + c, p);
    }
  }
}

// The probabilities of the lane's half row of scores, recomputed from the log-sum-exp (a
// column's, lse[col * lse_step], or with lse_step 0 the row's): the row is token `row_token`, the
// columns are tokens first_col.., queries of that key or keys of that query, and a key after its
// query gets 0.
__device__ void Probabilities(float (&p)[kHalfTile], const float* scores, int row_token,
                              int first_col, bool columns_are_queries, const float* lse,
                              int lse_step, float scale_log2) {
  const int lane = threadIdx.x % 32, row = lane / 2, half = lane % 2;
#pragma unroll
  for (int c = 0; c < kHalfTile; ++c) {
    const int col = ScoreColumn(c, half), col_token = first_col + col;
    const bool causal = columns_are_queries ? col_token >= row_token : col_token <= row_token;
    p[c] = causal ? exp2f(scores[row * kScoreLd + col] * scale_log2 - lse[col * lse_step]) : 0.0f;
  }
}

// The score gradients dS = P * (dP - delta) (fp32 dP in `scores`, P in `p`, delta per column
// column, or with delta_step 0 one for the row) replace the scores, as bf16 with leading dimension kGradLd.
__device__ void ScoreGradientsInPlace(float* scores, float (&p)[kHalfTile], const float* delta,
                                      int delta_step) {
  const int lane = threadIdx.x % 32, row = lane / 2, half = lane % 2;
  __syncwarp();
#pragma unroll
  for (int c = 0; c < kHalfTile; ++c) {
    const int col = ScoreColumn(c, half);
    p[c] *= scores[row * kScoreLd + col] - delta[col * delta_step];
  }
  __syncwarp();  // every lane has read its scores before any are overwritten
  bf16* grads = reinterpret_cast<bf16*>(scores);
#pragma unroll
  for (int c = 0; c < kHalfTile; ++c) {
    grads[row * kGradLd + ScoreColumn(c, half)] = __float2bfloat16_rn(p[c]);
  }
  __syncwarp();
}

struct Problem {
  int T, C, NH;
  float scale, scale_log2;  // 1/sqrt(hs), and times log2(e)
};

// Where a thread of one of the three tiled kernels works: the block's batch row b and head h
// (blockIdx.x = b * NH + h), the thread's warp and, within the warp's rows, its row (lane / 2)
// and half (lane % 2), and the head's queries in qkv (its keys at q + C, its values at q + 2C,
// rows `stride` apart).
struct Place {
  int bh, b, h, warp, row, half;
  int64_t stride;
  const bf16* q;
};

template <int kD>
__device__ Place PlaceOf(const bf16* qkv, const Problem& pr) {
  const int bh = blockIdx.x, b = bh / pr.NH, h = bh % pr.NH;
  const int64_t stride = 3 * int64_t{pr.C};
  const int lane = threadIdx.x % 32;
  return Place{bh,       b,        h,      static_cast<int>(threadIdx.x / 32),
               lane / 2, lane % 2, stride, qkv + int64_t{b} * pr.T * stride + h * kD};
}

// Grid (B * NH, query tiles), the longest rows' tiles first.
template <int kD>
__global__ void __launch_bounds__(kThreads, 3)
    ForwardKernel(bf16* out, float* lse, const bf16* qkv, Problem pr) {
  using H = Head<kD>;
  __shared__ __align__(32) bf16 keys[kTile * H::kLd];
  __shared__ __align__(32) bf16 values[kTile * H::kLd];
  __shared__ __align__(32) float score_tiles[kWarps][16 * kScoreLd];
  __shared__ __align__(32) bf16 prob_tiles[kWarps][16 * kProbLd];
  const auto [bh, b, h, warp, row, half, stride, q] = PlaceOf<kD>(qkv, pr);
  const int qt = gridDim.y - 1 - blockIdx.y;
  float* scores = score_tiles[warp];
  bf16* probs = prob_tiles[warp];
  const int query = qt * kTile + warp * 16 + row;

  LoadTile<kD>(keys, q, stride, qt * kTile, pr.T);  // the queries, through the key buffer
  __syncthreads();
  FragA qa[H::kSteps];
  LoadRows<kD>(qa, keys, warp * 16);

  float m = -INFINITY, l = 0, o[H::kHalf];
#pragma unroll
  for (int c = 0; c < H::kHalf; ++c) o[c] = 0;
  for (int kt = 0; kt <= qt; ++kt) {
    __syncthreads();  // every warp is done with the previous tiles
    LoadTile<kD>(keys, q + pr.C, stride, kt * kTile, pr.T);
    LoadTile<kD>(values, q + 2 * pr.C, stride, kt * kTile, pr.T);
    __syncthreads();
    RowsTimesTileT<kD>(scores, qa, keys);
    __syncwarp();
    // Online softmax in the log2 domain over the lane's half row; keys after the query masked.
    float x[kHalfTile], tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < kHalfTile; ++c) {
      const int col = ScoreColumn(c, half);
      x[c] = kt * kTile + col <= query ? scores[row * kScoreLd + col] * pr.scale_log2 : -INFINITY;
      tile_max = fmaxf(tile_max, x[c]);
    }
    const float m_new = fmaxf(m, fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1)));
    const float alpha = exp2f(m - m_new);  // 0 on the first tile
    float sum = 0;
#pragma unroll
    for (int c = 0; c < kHalfTile; ++c) {
      const float e = exp2f(x[c] - m_new);
      sum += e;
      probs[row * kProbLd + ScoreColumn(c, half)] = __float2bfloat16_rn(e);
    }
    l = l * alpha + sum + __shfl_xor_sync(0xffffffffu, sum, 1);
    m = m_new;
    __syncwarp();
    // O = O * alpha + P V, P V through the score buffer.
    FragC pv[H::kSteps];
#pragma unroll
    for (int n = 0; n < H::kSteps; ++n) wmma::fill_fragment(pv[n], 0.0f);
    Accumulate<kD>(pv, probs, kProbLd, values);
#pragma unroll
    for (int n = 0; n < H::kSteps; ++n) {
      wmma::store_matrix_sync(scores + n * 16, pv[n], kScoreLd, wmma::mem_row_major);
    }
    __syncwarp();
#pragma unroll
    for (int c = 0; c < H::kHalf; ++c) {
      o[c] = o[c] * alpha + scores[row * kScoreLd + half * H::kHalf + c];
    }
  }
  if (query >= pr.T) return;
  const float inv = 1.0f / l;
  bf16* dst = out + (int64_t{b} * pr.T + query) * pr.C + h * kD + half * H::kHalf;
#pragma unroll
  for (int c = 0; c < H::kHalf; c += 8) {
    Pack16<bf16> p;
#pragma unroll
    for (int e = 0; e < 8; ++e) p.Set(e, o[c + e] * inv);
    StorePack(dst + c, p);
  }
  if (half == 0) lse[int64_t{bh} * pr.T + query] = m + log2f(l);
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

// dK and dV. Grid (B * NH, key tiles): each block walks the query tiles from its own on.
template <int kD>
__global__ void KeysBackwardKernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                   const float* delta, Problem pr) {
  using H = Head<kD>;
  __shared__ __align__(32) bf16 queries[kTile * H::kLd];
  __shared__ __align__(32) bf16 grads[kTile * H::kLd];  // dout rows
  __shared__ float lse_tile[kTile], delta_tile[kTile];
  __shared__ __align__(32) float score_tiles[kWarps][16 * kScoreLd];
  __shared__ __align__(32) bf16 prob_tiles[kWarps][16 * kProbLd];
  const auto [bh, b, h, warp, row, half, stride, q] = PlaceOf<kD>(qkv, pr);
  const int kt = blockIdx.y, tiles = gridDim.y;
  const bf16* dO = dout + int64_t{b} * pr.T * pr.C + h * kD;
  float* scores = score_tiles[warp];
  bf16* probs = prob_tiles[warp];
  const int key = kt * kTile + warp * 16 + row;

  LoadTile<kD>(queries, q + pr.C, stride, kt * kTile, pr.T);  // the keys and values first
  LoadTile<kD>(grads, q + 2 * pr.C, stride, kt * kTile, pr.T);
  __syncthreads();
  FragA ka[H::kSteps], va[H::kSteps];
  LoadRows<kD>(ka, queries, warp * 16);
  LoadRows<kD>(va, grads, warp * 16);
  FragC dk[H::kSteps], dv[H::kSteps];
#pragma unroll
  for (int n = 0; n < H::kSteps; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  for (int qt = kt; qt < tiles; ++qt) {
    __syncthreads();
    LoadTile<kD>(queries, q, stride, qt * kTile, pr.T);
    LoadTile<kD>(grads, dO, pr.C, qt * kTile, pr.T);
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      const int t = qt * kTile + i;
      lse_tile[i] = t < pr.T ? lse[int64_t{bh} * pr.T + t] : INFINITY;  // P = 0 past T
      delta_tile[i] = t < pr.T ? delta[int64_t{bh} * pr.T + t] : 0.0f;
    }
    __syncthreads();
    // P^T (the warp's keys by the tile's queries), recomputed from the scores.
    RowsTimesTileT<kD>(scores, ka, queries);
    __syncwarp();
    float p[kHalfTile];
    Probabilities(p, scores, key, qt * kTile, /*columns_are_queries=*/true, lse_tile, 1,
                  pr.scale_log2);
#pragma unroll
    for (int c = 0; c < kHalfTile; ++c) {
      probs[row * kProbLd + ScoreColumn(c, half)] = __float2bfloat16_rn(p[c]);
    }
    __syncwarp();
    RowsTimesTileT<kD>(scores, va, grads);  // dP^T = V dout^T
    ScoreGradientsInPlace(scores, p, delta_tile, 1);
    Accumulate<kD>(dv, probs, kProbLd, grads);
    Accumulate<kD>(dk, reinterpret_cast<const bf16*>(scores), kGradLd, queries);
  }
  bf16* dst = dqkv + int64_t{b} * pr.T * stride + h * kD;
  WriteRows<kD>(dst + pr.C, stride, kt * kTile + warp * 16, pr.T, dk, pr.scale, scores);
  WriteRows<kD>(dst + 2 * pr.C, stride, kt * kTile + warp * 16, pr.T, dv, 1.0f, scores);
}

// dQ. Grid (B * NH, query tiles), the longest rows' tiles first: each block walks the key
// tiles up to its own.
template <int kD>
__global__ void QueriesBackwardKernel(bf16* dqkv, const bf16* dout, const bf16* qkv,
                                      const float* lse, const float* delta, Problem pr) {
  using H = Head<kD>;
  __shared__ __align__(32) bf16 keys[kTile * H::kLd];
  __shared__ __align__(32) bf16 values[kTile * H::kLd];
  __shared__ __align__(32) float score_tiles[kWarps][16 * kScoreLd];
  const auto [bh, b, h, warp, row, half, stride, q] = PlaceOf<kD>(qkv, pr);
  const int qt = gridDim.y - 1 - blockIdx.y;
  float* scores = score_tiles[warp];
  const int query = qt * kTile + warp * 16 + row;
  // Rows past T: any finite values (their results are not written).
  const float row_lse = query < pr.T ? lse[int64_t{bh} * pr.T + query] : 0.0f;
  const float row_delta = query < pr.T ? delta[int64_t{bh} * pr.T + query] : 0.0f;

  LoadTile<kD>(keys, q, stride, qt * kTile, pr.T);  // the queries and their output gradients
  LoadTile<kD>(values, dout + int64_t{b} * pr.T * pr.C + h * kD, pr.C, qt * kTile, pr.T);
  __syncthreads();
  FragA qa[H::kSteps], ga[H::kSteps];
  LoadRows<kD>(qa, keys, warp * 16);
  LoadRows<kD>(ga, values, warp * 16);
  FragC dq[H::kSteps];
#pragma unroll
  for (int n = 0; n < H::kSteps; ++n) wmma::fill_fragment(dq[n], 0.0f);
  for (int kt = 0; kt <= qt; ++kt) {
    __syncthreads();
    LoadTile<kD>(keys, q + pr.C, stride, kt * kTile, pr.T);
    LoadTile<kD>(values, q + 2 * pr.C, stride, kt * kTile, pr.T);
    __syncthreads();
    RowsTimesTileT<kD>(scores, qa, keys);
    __syncwarp();
    float p[kHalfTile];
    Probabilities(p, scores, query, kt * kTile, /*columns_are_queries=*/false, &row_lse, 0,
                  pr.scale_log2);
    __syncwarp();
    RowsTimesTileT<kD>(scores, ga, values);  // dP = dout V^T
    ScoreGradientsInPlace(scores, p, &row_delta, 0);
    Accumulate<kD>(dq, reinterpret_cast<const bf16*>(scores), kGradLd, keys);
  }
  WriteRows<kD>(dqkv + int64_t{b} * pr.T * stride + h * kD, stride, qt * kTile + warp * 16, pr.T,
                dq, pr.scale, scores);
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
