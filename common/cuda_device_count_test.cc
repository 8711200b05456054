#include "common/cuda_device_count.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster {
namespace {

using ::testing::HasSubstr;

TEST(CudaDeviceCountTest, NoDeviceAndNoDriverMeanNoGpu) {
  EXPECT_EQ(*InterpretCudaDeviceCount(cudaSuccess, 3, 13000, 13000), 3);
  EXPECT_EQ(*InterpretCudaDeviceCount(cudaErrorNoDevice, 0, 13000, 13000), 0);
  // What a machine without the driver's library answers (this development machine).
  EXPECT_EQ(*InterpretCudaDeviceCount(cudaErrorInsufficientDriver, 0, 0, 13000), 0);
}

TEST(CudaDeviceCountTest, ADriverTooOldForTheRuntimeIsAnErrorNamingBothVersions) {
  const absl::StatusOr<int> count =
      InterpretCudaDeviceCount(cudaErrorInsufficientDriver, 0, 12040, 13000);
  ASSERT_FALSE(count.ok());
  EXPECT_EQ(count.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(count.status().message());
  EXPECT_THAT(message, HasSubstr("cudaErrorInsufficientDriver"));
  EXPECT_THAT(message, HasSubstr("the driver supports up to CUDA 12.4, the runtime is CUDA 13.0"));
}

TEST(CudaDeviceCountTest, OtherRuntimeFailuresAreErrors) {
  const absl::StatusOr<int> count = InterpretCudaDeviceCount(cudaErrorUnknown, 0, 13000, 13000);
  ASSERT_FALSE(count.ok());
  EXPECT_THAT(std::string(count.status().message()), HasSubstr("cudaErrorUnknown"));
}

// This machine's own answer: a count (0 without a GPU), never an error. On a GPU machine whose
// driver cannot serve this build, this is the test that says so.
TEST(CudaDeviceCountTest, ThisMachineAnswersWithACount) {
  const absl::StatusOr<int> count = CudaDeviceCount();
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_GE(*count, 0);
}

}  // namespace
}  // namespace ringmaster
