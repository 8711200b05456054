#include "trainer/cuda/device_selection.h"

#include <map>

#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

absl::StatusOr<std::optional<int>> Choose(std::optional<std::string> visible,
                                          std::optional<std::string> local_rank) {
  return CudaDeviceFromEnvironment([&](const char* name) -> std::optional<std::string> {
    if (std::string(name) == "CUDA_VISIBLE_DEVICES") return visible;
    if (std::string(name) == "LOCAL_RANK") return local_rank;
    return std::nullopt;
  });
}

// The device chosen without LOCAL_RANK; -2 for an error.
std::optional<int> With(std::optional<std::string> visible) {
  absl::StatusOr<std::optional<int>> chosen = Choose(visible, std::nullopt);
  return chosen.ok() ? *chosen : std::optional<int>(-2);
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

TEST(DeviceSelectionTest, WithSeveralVisibleEachLocalRankTakesItsOwn) {
  EXPECT_EQ(*Choose("0,1,2,3", "2"), 2);
  EXPECT_EQ(*Choose("4,5", "0"), 0);
  EXPECT_EQ(*Choose("4,5", std::nullopt), 0);  // one process by hand: the first
  EXPECT_EQ(*Choose("3", "5"), 0);             // the agent's way: one GPU, numbered 0
  EXPECT_EQ(*Choose("0,1,-1,2", "1"), 1);      // two devices: CUDA stops at "-1"
}

TEST(DeviceSelectionTest, TooFewDevicesForTheLocalRankIsAConfigurationError) {
  absl::StatusOr<std::optional<int>> shared = Choose("0,1", "2");
  ASSERT_FALSE(shared.ok());
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(shared.status().message().find("CUDA_VISIBLE_DEVICES"), std::string::npos)
      << shared.status();
  EXPECT_NE(shared.status().message().find("LOCAL_RANK=2"), std::string::npos) << shared.status();
  EXPECT_EQ(Choose("0,1,-1,2", "2").status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::optional<int>> garbled = Choose("0,1", "one");
  ASSERT_FALSE(garbled.ok());
  EXPECT_NE(garbled.status().message().find("LOCAL_RANK"), std::string::npos) << garbled.status();
}

}  // namespace
}  // namespace ringmaster::trainer
