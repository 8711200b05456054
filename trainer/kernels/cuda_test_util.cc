#include "trainer/kernels/cuda_test_util.h"

#include <cmath>
#include <cstring>
#include <random>

#include "trainer/kernels/bf16.h"

namespace ringmaster::kernels::testing {
namespace {

float ToFloat(float x) { return x; }
float ToFloat(__nv_bfloat16 x) {
  const __nv_bfloat16_raw raw = x;
  return Bf16BitsToFloat(raw.x);
}
template <typename T>
T FromFloat(float x);
template <>
float FromFloat<float>(float x) {
  return x;
}
template <>
__nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  __nv_bfloat16_raw raw;
  raw.x = FloatToBf16Bits(x);
  return __nv_bfloat16(raw);
}

}  // namespace

bool Emulated() {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  // fake_cuda_runtime.cc's name.
  return std::strncmp(prop.name, "Emulated GPU", 12) == 0;
}

bool HaveGpu() {
  const absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) {
    ADD_FAILURE() << count.status();
    return false;
  }
  return *count > 0;
}

std::vector<float> Uniform(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

template <typename T>
std::vector<float> RoundTo(std::vector<float> v) {
  for (float& x : v) x = ToFloat(FromFloat<T>(x));
  return v;
}

template <typename T>
DeviceArray<T>::DeviceArray(size_t n) : n_(n) {
  EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemset(data_, 0, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
}

template <typename T>
DeviceArray<T>::DeviceArray(const std::vector<float>& host) : DeviceArray(host.size()) {
  Upload(host);
}

template <typename T>
DeviceArray<T>::~DeviceArray() {
  if (data_ != nullptr) cudaFree(data_);
}

template <typename T>
void DeviceArray<T>::Upload(const std::vector<float>& host) {
  ASSERT_EQ(host.size(), n_);
  std::vector<T> converted(n_);
  for (size_t i = 0; i < n_; ++i) converted[i] = FromFloat<T>(host[i]);
  ASSERT_EQ(cudaMemcpy(data_, converted.data(), n_ * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
}

template <typename T>
std::vector<float> DeviceArray<T>::Download() const {
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<T> raw(n_);
  EXPECT_EQ(cudaMemcpy(raw.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<float> out(n_);
  for (size_t i = 0; i < n_; ++i) out[i] = ToFloat(raw[i]);
  return out;
}

template <typename T>
DeviceBufferOf<T>::DeviceBufferOf(const std::vector<T>& host) : n_(host.size()) {
  EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(n_, 1) * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(data_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
}

template <typename T>
DeviceBufferOf<T>::~DeviceBufferOf() {
  if (data_ != nullptr) cudaFree(data_);
}

template <typename T>
std::vector<T> DeviceBufferOf<T>::Download() const {
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<T> out(n_);
  EXPECT_EQ(cudaMemcpy(out.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double atol,
                 double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double allowed = atol + rtol * std::fabs(want[i]);
    if (!(err <= allowed)) {  // NaN fails too
      if (bad++ < 5) {
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i]
                      << " (error " << err << " > " << allowed << ")";
      }
    }
    if (err > worst || std::isnan(err)) {
      worst = err;
      worst_i = i;
    }
  }
  if (bad > 0) {
    ADD_FAILURE() << what << ": " << bad << " of " << want.size()
                  << " elements out of tolerance; largest error " << worst << " at " << worst_i;
  }
}

template std::vector<float> RoundTo<float>(std::vector<float>);
template std::vector<float> RoundTo<__nv_bfloat16>(std::vector<float>);
template class DeviceArray<float>;
template class DeviceArray<__nv_bfloat16>;
template class DeviceBufferOf<int32_t>;
template class DeviceBufferOf<double>;
template class DeviceBufferOf<float>;

}  // namespace ringmaster::kernels::testing
