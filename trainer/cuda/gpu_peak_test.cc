#include "trainer/cuda/gpu_peak.h"

#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

TEST(GpuPeakTest, KnownGpus) {
  EXPECT_EQ(LookUpGpuPeak("NVIDIA H100 80GB HBM3", 9, 0).bf16_flops, 989e12);
  EXPECT_EQ(LookUpGpuPeak("NVIDIA H100 PCIe", 9, 0).bf16_flops, 756e12);
  EXPECT_EQ(LookUpGpuPeak("NVIDIA H200", 9, 0).bf16_flops, 989e12);
  EXPECT_EQ(LookUpGpuPeak("NVIDIA A100-SXM4-80GB", 8, 0).bf16_flops, 312e12);
  EXPECT_NE(LookUpGpuPeak("NVIDIA H100 80GB HBM3", 9, 0).explanation.find("989"),
            std::string::npos);
  // The more specific name wins: a GH200 is labelled as such, not as the H200 in its name.
  EXPECT_EQ(LookUpGpuPeak("NVIDIA GH200 480GB", 9, 0).explanation.find("GH200"), 0);
}

TEST(GpuPeakTest, UnknownGpusAskForTheFlag) {
  const GpuPeak p = LookUpGpuPeak("NVIDIA GeForce RTX 4090", 8, 9);
  EXPECT_EQ(p.bf16_flops, 0);
  EXPECT_NE(p.explanation.find("--peak_flops"), std::string::npos);
  // The name alone is not enough: an "A100" string on another architecture does not match.
  EXPECT_EQ(LookUpGpuPeak("A100", 9, 0).bf16_flops, 0);
}

}  // namespace
}  // namespace ringmaster::trainer
