#include "trainer/cuda/gpu_peak.h"

#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

TEST(GpuPeakTest, KnownGpus) {
  EXPECT_EQ(LookUpGpuPeak("NVIDIA H100 80GB HBM3", 9, 0).flops, 989e12);
  EXPECT_EQ(LookUpGpuPeak("NVIDIA H100 PCIe", 9, 0).flops, 756e12);
  EXPECT_EQ(LookUpGpuPeak("NVIDIA H200", 9, 0).flops, 989e12);
  EXPECT_EQ(LookUpGpuPeak("NVIDIA A100-SXM4-80GB", 8, 0).flops, 312e12);
  EXPECT_NE(LookUpGpuPeak("NVIDIA H100 80GB HBM3", 9, 0).explanation.find("989"),
            std::string::npos);
  // The more specific name wins: a GH200 is labelled as such, not as the H200 in its name.
  EXPECT_EQ(LookUpGpuPeak("NVIDIA GH200 480GB", 9, 0).explanation.find("GH200"), 0);
}

TEST(GpuPeakTest, Fp32TrainingIsMeasuredAgainstTheFp32Peak) {
  const GpuPeak h100 = LookUpGpuPeak("NVIDIA H100 80GB HBM3", 9, 0, /*bf16=*/false);
  EXPECT_EQ(h100.flops, 67e12);
  EXPECT_NE(h100.explanation.find("fp32"), std::string::npos) << h100.explanation;
  EXPECT_EQ(LookUpGpuPeak("NVIDIA H100 PCIe", 9, 0, false).flops, 51e12);
  EXPECT_EQ(LookUpGpuPeak("NVIDIA A100-SXM4-40GB", 8, 0, false).flops, 19.5e12);
  EXPECT_NE(LookUpGpuPeak("NVIDIA H100 80GB HBM3", 9, 0).explanation.find("bf16"),
            std::string::npos);
}

TEST(GpuPeakTest, UnknownGpusAskForTheFlag) {
  const GpuPeak p = LookUpGpuPeak("NVIDIA GeForce RTX 4090", 8, 9);
  EXPECT_EQ(p.flops, 0);
  EXPECT_NE(p.explanation.find("--peak_flops"), std::string::npos);
  EXPECT_EQ(LookUpGpuPeak("NVIDIA GeForce RTX 4090", 8, 9, false).flops, 0);
  // The name alone is not enough: an "A100" string on another architecture does not match.
  EXPECT_EQ(LookUpGpuPeak("A100", 9, 0).flops, 0);
}

}  // namespace
}  // namespace ringmaster::trainer
