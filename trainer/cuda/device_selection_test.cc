#include "trainer/cuda/device_selection.h"

#include <map>

#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

std::optional<int> With(std::optional<std::string> visible) {
  return CudaDeviceFromEnvironment([&](const char* name) -> std::optional<std::string> {
    if (std::string(name) == "CUDA_VISIBLE_DEVICES") return visible;
    return std::nullopt;
  });
}

TEST(DeviceSelectionTest, TheAgentsAssignedGpuIsDeviceZero) {
  EXPECT_EQ(With("3"), 0);
  EXPECT_EQ(With("0"), 0);
  EXPECT_EQ(With("2,3"), 0);
  EXPECT_EQ(With("GPU-8f6c1a2e-0000-1111-2222-333344445555"), 0);
  EXPECT_EQ(With("MIG-1f2e3d4c-aaaa-bbbb-cccc-ddddeeeeffff"), 0);
  EXPECT_EQ(With(" 1"), 0);
}

TEST(DeviceSelectionTest, NoGpuMeansTheCpu) {
  EXPECT_EQ(With(std::nullopt), std::nullopt);
  EXPECT_EQ(With(""), std::nullopt);
  EXPECT_EQ(With("-1"), std::nullopt);
  EXPECT_EQ(With("none"), std::nullopt);
  EXPECT_EQ(With("NoDevFiles"), std::nullopt);
  EXPECT_EQ(With("-1,0"), std::nullopt);  // CUDA stops at the first invalid entry
}

}  // namespace
}  // namespace ringmaster::trainer
