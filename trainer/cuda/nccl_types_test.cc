// Runs without a GPU: the mapping and NCCL's error strings need no device.
#include "trainer/cuda/nccl_types.h"

#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

TEST(NcclTypesTest, FailedPeersAreRetryable) {
  EXPECT_TRUE(NcclStatus(ncclSuccess, "x").ok());
  EXPECT_EQ(NcclStatus(ncclRemoteError, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(NcclStatus(ncclSystemError, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(NcclStatus(ncclUnhandledCudaError, "x").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(NcclStatus(ncclInternalError, "x").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(NcclStatus(ncclInvalidUsage, "x").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(NcclStatus(ncclInProgress, "x").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(NcclStatus(ncclInvalidArgument, "x").code(), absl::StatusCode::kInvalidArgument);
}

TEST(NcclTypesTest, MessageNamesTheOperation) {
  const absl::Status s = NcclStatus(ncclRemoteError, "all_reduce on dp0");
  EXPECT_EQ(s.message().rfind("all_reduce on dp0: ", 0), 0u) << s;
  EXPECT_GT(s.message().size(), std::string("all_reduce on dp0: ").size());
}

TEST(NcclTypesTest, DataTypes) {
  EXPECT_EQ(NcclDataType(DType::kF32), ncclFloat32);
  EXPECT_EQ(NcclDataType(DType::kBF16), ncclBfloat16);
  EXPECT_EQ(NcclDataType(DType::kI32), ncclInt32);
}

}  // namespace
}  // namespace ringmaster::trainer
