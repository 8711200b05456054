// Tensor-core instructions on the CPU, for cuda_emu.h: the two that tensor_core.cuh uses, PTX's
// mma.sync.m16n8k16 (bf16 operands, fp32 accumulators) and ldmatrix.x4, with the fragment
// layouts PTX documents. Each is a warp-wide exchange: every lane publishes its operands (or its
// row address), then computes or reads its own part of the result, so a kernel that puts an
// element in the wrong register or lane computes the wrong thing here as it would on a GPU.
//
// ldmatrix checks what a GPU faults on: a row address that is not 16-byte aligned fails the
// launch (cudaErrorMisalignedAddress).
#ifndef RINGMASTER_TESTING_CUDA_EMU_MMA_EMU_H_
#define RINGMASTER_TESTING_CUDA_EMU_MMA_EMU_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "trainer/kernels/bf16.h"

namespace emu {

void RecordError(cudaError_t error, const std::string& what);
// Every lane of the calling thread's warp gives `bytes` (at most kMaxGatherBytes) from `mine`;
// `all` receives the 32 lanes' in lane order; returns the calling thread's lane. A warp-wide
// barrier, as a shuffle.
constexpr size_t kMaxGatherBytes = 64;
int WarpAllGather(const void* mine, size_t bytes, void* all);

namespace internal {

// The low or high bf16 of a register of two.
inline float Bf16Half(uint32_t bits, int high) {
  return ringmaster::kernels::Bf16BitsToFloat(static_cast<uint16_t>(high ? bits >> 16 : bits));
}

inline uint32_t Bf16Pair(const __nv_bfloat16* p) {
  uint32_t bits;
  std::memcpy(&bits, p, sizeof bits);  // p[0] in the low half
  return bits;
}

}  // namespace internal

// d += a b over one m16n8k16 tile, each lane's registers as tensor_core.cuh describes. Products
// of bf16 are exact in fp32; they are summed in k order, onto d.
inline void MmaM16N8K16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  struct Operands {
    uint32_t a[4], b[2];
  };
  Operands mine, all[32];
  std::memcpy(mine.a, a, sizeof mine.a);
  std::memcpy(mine.b, b, sizeof mine.b);
  const int lane = WarpAllGather(&mine, sizeof mine, all);
  float a_tile[16][16], b_tile[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < 2; ++e) {
      a_tile[g][2 * t + e] = internal::Bf16Half(all[l].a[0], e);
      a_tile[g + 8][2 * t + e] = internal::Bf16Half(all[l].a[1], e);
      a_tile[g][2 * t + 8 + e] = internal::Bf16Half(all[l].a[2], e);
      a_tile[g + 8][2 * t + 8 + e] = internal::Bf16Half(all[l].a[3], e);
      b_tile[2 * t + e][g] = internal::Bf16Half(all[l].b[0], e);
      b_tile[2 * t + 8 + e][g] = internal::Bf16Half(all[l].b[1], e);
    }
  }
  for (int i = 0; i < 4; ++i) {
    const int row = lane / 4 + (i / 2) * 8, column = 2 * (lane % 4) + i % 2;
    float sum = d[i];
    for (int k = 0; k < 16; ++k) sum += a_tile[row][k] * b_tile[k][column];
    d[i] = sum;
  }
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: `row` is this lane's row address.
inline void LoadMatricesX4(uint32_t (&r)[4], const __nv_bfloat16* row, bool transposed) {
  const __nv_bfloat16* rows[32];
  const int lane = WarpAllGather(&row, sizeof row, rows), g = lane / 4, t = lane % 4;
  for (const __nv_bfloat16* p : rows) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
      RecordError(cudaErrorMisalignedAddress, "ldmatrix: a row address not 16-byte aligned");
      return;
    }
  }
  for (int j = 0; j < 4; ++j) {
    const __nv_bfloat16* const* m = rows + 8 * j;  // matrix j's rows
    if (transposed) {
      const __nv_bfloat16 pair[2] = {m[2 * t][g], m[2 * t + 1][g]};
      r[j] = internal::Bf16Pair(pair);
    } else {
      r[j] = internal::Bf16Pair(m[g] + 2 * t);
    }
  }
}

}  // namespace emu

#endif  // RINGMASTER_TESTING_CUDA_EMU_MMA_EMU_H_
