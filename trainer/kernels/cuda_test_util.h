// Helpers of the CUDA parity tests: GPU detection, typed fixtures that skip without a GPU,
// device arrays of fp32 or bf16 filled from and read back into host floats, bf16 rounding of
// reference inputs, and a tolerance check that reports the worst element.
#ifndef RINGMASTER_TRAINER_KERNELS_CUDA_TEST_UTIL_H_
#define RINGMASTER_TRAINER_KERNELS_CUDA_TEST_UTIL_H_

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "common/cuda_device_count.h"
#include "gtest/gtest.h"
#include "trainer/kernels/gemm_plan.h"

namespace ringmaster::kernels::testing {

// True when the CUDA runtime sees at least one device. A machine with GPUs the runtime cannot
// use (a driver too old for it) is a test failure, not "no GPU" (CudaDeviceCount).
bool HaveGpu();

// True when device 0 is the CPU emulator's (testing/cuda_emu, --config=emu): a test may then
// repeat a case that only its size makes slow fewer times, never skip a code path.
bool Emulated();

#define RM_SKIP_WITHOUT_GPU()                                              \
  do {                                                                     \
    const ::absl::StatusOr<int> rm_gpus = ::ringmaster::CudaDeviceCount(); \
    ASSERT_TRUE(rm_gpus.ok()) << rm_gpus.status();                         \
    if (*rm_gpus == 0) {                                                   \
      GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount)";       \
    }                                                                      \
  } while (0)

// The element types the typed parity tests run over.
using ElementTypes = ::testing::Types<float, __nv_bfloat16>;

// The ElementType of T (float or __nv_bfloat16).
template <typename T>
constexpr ElementType kElementType =
    std::is_same_v<T, float> ? ElementType::kF32 : ElementType::kBF16;

// `f32` when T is float, else `bf16`: a test's constant per element type, e.g.
// `template <typename T> constexpr Tol kTol = PerType<T>(Tol{1e-5, 1e-5}, Tol{1e-2, 1e-2});`.
template <typename T, typename V>
constexpr V PerType(V f32, V bf16) {
  return std::is_same_v<T, float> ? f32 : bf16;
}

// A tolerance of ExpectClose: |got - want| <= atol + rtol * |want|.
struct Tol {
  double atol = 0, rtol = 0;
};

// Fixture of the typed parity tests: every test is skipped without a GPU.
template <typename T>
class GpuTypedTest : public ::testing::Test {
 protected:
  void SetUp() override { RM_SKIP_WITHOUT_GPU(); }
};

// GpuTypedTest with a cuBLAS handle, `cublas_`, for the duration of each test.
template <typename T>
class CublasTypedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RM_SKIP_WITHOUT_GPU();
    ASSERT_EQ(cublasCreate(&cublas_), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (cublas_ != nullptr) cublasDestroy(cublas_);
  }
  cublasHandle_t cublas_ = nullptr;
};

// Uniform values in [lo, hi) from `seed`.
std::vector<float> Uniform(size_t n, float lo, float hi, uint32_t seed);

// Each value rounded to T (bf16: nearest even; float: unchanged): the inputs a CPU reference is
// given so that it sees exactly what the GPU sees.
template <typename T>
std::vector<float> RoundTo(std::vector<float> v);

// n elements of T on the current device (at least one allocated), freed on destruction.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n);
  // Uploads `host` converted to T.
  explicit DeviceArray(const std::vector<float>& host);
  ~DeviceArray();
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return data_; }
  size_t size() const { return n_; }
  void Upload(const std::vector<float>& host);
  // Synchronises the device, then reads back as floats.
  std::vector<float> Download() const;

 private:
  T* data_ = nullptr;
  size_t n_ = 0;
};

// Raw device memory of bytes (int32 token ids, doubles).
template <typename T>
class DeviceBufferOf {
 public:
  explicit DeviceBufferOf(const std::vector<T>& host);
  ~DeviceBufferOf();
  T* get() const { return data_; }
  std::vector<T> Download() const;

 private:
  T* data_ = nullptr;
  size_t n_ = 0;
};

// Expects |got[i] - want[i]| <= atol + rtol * |want[i]| for every i; reports up to 5 failures
// and the largest error.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double atol,
                 double rtol, const std::string& what);

// Tolerances for one element type: tight for fp32 (different summation orders and libm), at
// bf16's resolution for bf16 (8 significant bits: a rounding is up to 2^-9 relative).
template <typename T>
struct Tolerance;
template <>
struct Tolerance<float> {
  static constexpr double kAtol = 1e-5, kRtol = 1e-5;
  static constexpr const char* kName = "f32";
};
template <>
struct Tolerance<__nv_bfloat16> {
  static constexpr double kAtol = 1e-2, kRtol = 1e-2;
  static constexpr const char* kName = "bf16";
};

}  // namespace ringmaster::kernels::testing

#endif  // RINGMASTER_TRAINER_KERNELS_CUDA_TEST_UTIL_H_
