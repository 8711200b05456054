// Tensor-core products on registers: PTX's mma.sync.m16n8k16 (bf16 operands, fp32 accumulators)
// and ldmatrix (sm_80 and later), whose fragment layouts PTX documents, so that a kernel can work
// on a product's elements where they are (the flash attention kernels' softmax) and feed them to
// the next product without a trip through shared memory. For a lane l of the warp, g = l / 4 and
// t = l % 4; a register of two bf16 holds the lower column in its low half.
//
// Emulated on the CPU (testing/cuda_emu/mma_emu.h) with the same layouts, lane by lane.
#ifndef RINGMASTER_TRAINER_KERNELS_TENSOR_CORE_CUH_
#define RINGMASTER_TRAINER_KERNELS_TENSOR_CORE_CUH_

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

// Compiled by nvcc (its host pass leaves the device functions' bodies empty), or emulated.
#if !defined(__CUDACC__) && !defined(RINGMASTER_CUDA_EMU)
#error "tensor_core.cuh outside nvcc needs testing/cuda_emu/cuda_emu.h included first"
#endif

namespace ringmaster::kernels::device {

// A 16x16 A operand (rows by k): r[0] holds (g, 2t..2t+1), r[1] (g + 8, 2t..), r[2] (g, 2t + 8..),
// r[3] (g + 8, 2t + 8..).
struct MmaA {
  uint32_t r[4];
};
// A 16x8 B operand (k by columns): r[0] holds rows 2t and 2t + 1 of column g, r[1] rows 2t + 8
// and 2t + 9.
struct MmaB {
  uint32_t r[2];
};
// A 16x8 fp32 accumulator: c[0], c[1] are (g, 2t), (g, 2t + 1); c[2], c[3] the same of row g + 8.
struct MmaC {
  float c[4];
};

// Element i of an accumulator: its row and column in the 16x8 tile.
__device__ __forceinline__ int AccRow(int lane, int i) { return lane / 4 + (i / 2) * 8; }
__device__ __forceinline__ int AccColumn(int lane, int i) { return 2 * (lane % 4) + i % 2; }

__device__ __forceinline__ uint32_t PackBf16x2(float low, float high) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(low, high);
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  return bits;
}

// The A operand of the product over k = 16j .. 16j + 15 of a [16, 8n] matrix held as n
// accumulators (the layouts line up: accumulators 2j and 2j + 1 are its two column halves).
__device__ __forceinline__ MmaA AccumulatorsAsA(const MmaC& low, const MmaC& high) {
  return MmaA{{PackBf16x2(low.c[0], low.c[1]), PackBf16x2(low.c[2], low.c[3]),
               PackBf16x2(high.c[0], high.c[1]), PackBf16x2(high.c[2], high.c[3])}};
}

// d += a b.
__device__ __forceinline__ void Mma(MmaC& d, const MmaA& a, const MmaB& b) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d.c[0]), "+f"(d.c[1]), "+f"(d.c[2]), "+f"(d.c[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
#elif defined(RINGMASTER_CUDA_EMU)
  emu::MmaM16N8K16(d.c, a.r, b.r);
#endif
}

// Four 8x8 bf16 matrices from shared memory, lane l giving the address of row l % 8 of matrix
// l / 8 (16 bytes, 16-byte aligned): r[j] is matrix j's (g, 2t..2t + 1), or with kTransposed
// its (2t, g) and (2t + 1, g).
template <bool kTransposed>
__device__ __forceinline__ void LoadMatrices(uint32_t (&r)[4], const __nv_bfloat16* row) {
#if defined(__CUDA_ARCH__)
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (kTransposed) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  }
#elif defined(RINGMASTER_CUDA_EMU)
  emu::LoadMatricesX4(r, row, kTransposed);
#endif
}

}  // namespace ringmaster::kernels::device

#endif  // RINGMASTER_TRAINER_KERNELS_TENSOR_CORE_CUH_
