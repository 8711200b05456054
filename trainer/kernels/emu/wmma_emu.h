// Tensor-core matrix multiply-accumulate on the CPU: the part of mma.h's nvcuda::wmma that the
// .cu files use (16x16x16 tiles, bf16 operands, fp32 accumulators), for cuda_emu.h.
//
// A GPU spreads a fragment over the 32 lanes of a warp in an unspecified layout; here every lane
// holds the whole tile, row by row, and computes the whole product (each lane of a warp gets the
// same result, from the same shared memory). Kernels that use fragments only through these
// functions, and change their elements only the same way in every element (a uniform scale),
// compute the same on both.
//
// Loads and stores check what a GPU requires (CUDA's wmma documentation): a 256-bit (32-byte)
// aligned pointer and a leading dimension that is a multiple of 16 bytes; a violation fails the
// launch (cudaErrorMisalignedAddress), as a misaligned access faults on a GPU.
#ifndef RINGMASTER_TRAINER_KERNELS_EMU_WMMA_EMU_H_
#define RINGMASTER_TRAINER_KERNELS_EMU_WMMA_EMU_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

namespace emu {
void RecordError(cudaError_t error, const std::string& what);
}  // namespace emu

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "only 16x16x16 tiles are emulated");
  static constexpr int num_elements = 256;
  T x[num_elements];  // the whole tile, row-major: a is M x K, b is K x N, accumulator M x N
};

namespace internal {

template <typename T>
inline bool Checked(const T* p, unsigned ldm, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 == 0 && (ldm * sizeof(T)) % 16 == 0) return true;
  emu::RecordError(cudaErrorMisalignedAddress,
                   std::string(what) + ": pointer not 32-byte aligned or leading dimension " +
                       std::to_string(ldm) + " not a multiple of 16 bytes");
  return false;
}

// Element (r, c) of a row-major (or, with `transposed`, column-major) matrix in memory.
template <typename T>
inline T At(const T* p, unsigned ldm, bool transposed, int r, int c) {
  return transposed ? p[c * ldm + r] : p[r * ldm + c];
}

template <typename Frag, typename T>
inline void Load(Frag& f, const T* p, unsigned ldm, bool transposed) {
  if (!Checked(p, ldm, "wmma::load_matrix_sync")) return;
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = At(p, ldm, transposed, r, c);
  }
}

}  // namespace internal

template <typename Use, typename T, typename Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  internal::Load(f, p, ldm, std::is_same<Layout, col_major>::value);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t layout) {
  internal::Load(f, p, ldm, layout == mem_col_major);
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout) {
  if (!internal::Checked(p, ldm, "wmma::store_matrix_sync")) return;
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      (layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.x[r * 16 + c];
    }
  }
}

template <typename Use, typename T, typename Layout, typename V>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, const V& value) {
  for (T& e : f.x) e = static_cast<T>(value);
}

// d = a b + c, products exact (bf16 x bf16 fits fp32) and summed in fp32.
template <typename LayoutA, typename LayoutB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>& a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c) {
  float product[256];
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 16; ++n) {
      float sum = c.x[r * 16 + n];
      for (int k = 0; k < 16; ++k) {
        sum += __bfloat162float(a.x[r * 16 + k]) * __bfloat162float(b.x[k * 16 + n]);
      }
      product[r * 16 + n] = sum;
    }
  }
  for (int i = 0; i < 256; ++i) d.x[i] = product[i];  // d may be c
}

}  // namespace nvcuda::wmma

#endif  // RINGMASTER_TRAINER_KERNELS_EMU_WMMA_EMU_H_
