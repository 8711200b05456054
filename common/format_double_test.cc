#include "common/format_double.h"

#include "gtest/gtest.h"

namespace ringmaster {
namespace {

TEST(FormatDoubleTest, ShortestFormThatReadsBack) {
  EXPECT_EQ(FormatFiniteDouble(0.0003), "0.0003");
  EXPECT_EQ(FormatFiniteDouble(30), "30");
  EXPECT_EQ(FormatFiniteDouble(1.25), "1.25");
}

TEST(FormatDoubleTest, BandwidthInDecimalGigabytesOrMegabytes) {
  EXPECT_EQ(FormatBandwidth(1.534e9), "1.53 GB/s");
  EXPECT_EQ(FormatBandwidth(4.5e11), "450.00 GB/s");
  EXPECT_EQ(FormatBandwidth(1e8), "0.10 GB/s");
  EXPECT_EQ(FormatBandwidth(3.2e6), "3.20 MB/s");
  EXPECT_EQ(FormatBandwidth(0), "0.00 MB/s");
}

}  // namespace
}  // namespace ringmaster
