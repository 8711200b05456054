// Runs without a GPU: the mapping and the messages need only the CUDA libraries' string tables.
#include "trainer/cuda/cuda_status.h"

#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

TEST(CudaStatusTest, MapsCudaErrors) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "x").ok());
  EXPECT_EQ(CudaStatus(cudaErrorMemoryAllocation, "x").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CudaStatus(cudaErrorNoDevice, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(CudaStatus(cudaErrorInsufficientDriver, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(CudaStatus(cudaErrorIllegalAddress, "x").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(CudaStatus(cudaErrorLaunchFailure, "x").code(), absl::StatusCode::kInternal);
}

TEST(CudaStatusTest, MessageNamesTheOperationAndTheError) {
  const absl::Status s = CudaStatus(cudaErrorIllegalAddress, "layernorm forward");
  EXPECT_NE(s.message().find("layernorm forward: cudaErrorIllegalAddress: "), std::string::npos)
      << s;
}

TEST(CudaStatusTest, MapsCublasErrors) {
  EXPECT_TRUE(CublasStatus(CUBLAS_STATUS_SUCCESS, "x").ok());
  EXPECT_EQ(CublasStatus(CUBLAS_STATUS_ALLOC_FAILED, "x").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CublasStatus(CUBLAS_STATUS_NOT_INITIALIZED, "x").code(),
            absl::StatusCode::kUnavailable);
  const absl::Status s = CublasStatus(CUBLAS_STATUS_EXECUTION_FAILED, "gemm");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("gemm: CUBLAS_STATUS_EXECUTION_FAILED"), std::string::npos) << s;
}

}  // namespace
}  // namespace ringmaster::trainer
