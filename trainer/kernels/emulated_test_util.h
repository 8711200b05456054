// Helpers of the tests that run the CUDA kernels on the CPU (emu/cuda_emu.h): host arrays of
// fp32 or bf16 made from and read back into floats, the check that a launch ran cleanly, and
// the two thread orders every kernel is run in.
#ifndef RINGMASTER_TRAINER_KERNELS_EMULATED_TEST_UTIL_H_
#define RINGMASTER_TRAINER_KERNELS_EMULATED_TEST_UTIL_H_

#include <cuda_bf16.h>

#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/emu/cuda_emu.h"

namespace ringmaster::kernels::testing {

// `v` converted to T (bf16: round to nearest even).
template <typename T>
std::vector<T> To(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<T>(v[i]);
  return out;
}
template <>
inline std::vector<__nv_bfloat16> To(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16_rn(v[i]);
  return out;
}

inline std::vector<float> Floats(const std::vector<float>& v) { return v; }
inline std::vector<float> Floats(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
  return out;
}

// Runs the threads of every block in `order` while in scope.
class ThreadOrder {
 public:
  explicit ThreadOrder(emu::Order order) { emu::SetOrder(order); }
  ~ThreadOrder() { emu::SetOrder(emu::Order::kForward); }
};
inline constexpr emu::Order kOrders[] = {emu::Order::kForward, emu::Order::kReverse};

}  // namespace ringmaster::kernels::testing

// A launcher's call that must succeed with nothing reported by the emulator.
#define ASSERT_LAUNCHED(call)                              \
  do {                                                     \
    const cudaError_t rm_launched = (call);                \
    const std::string rm_failures = ::emu::TakeFailures(); \
    ASSERT_EQ(rm_launched, cudaSuccess) << rm_failures;    \
    ASSERT_EQ(rm_failures, "");                            \
  } while (0)

#endif  // RINGMASTER_TRAINER_KERNELS_EMULATED_TEST_UTIL_H_
