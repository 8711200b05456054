#include "trainer/kernels/bf16.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace ringmaster::kernels {
namespace {

float FromBits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

TEST(Bf16Test, ExactValuesRoundTrip) {
  for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 3.0f, -1024.0f, 1.0f / 128}) {
    EXPECT_EQ(RoundToBf16(x), x) << x;
  }
  EXPECT_TRUE(std::signbit(RoundToBf16(-0.0f)));
  // Every bf16 bit pattern that is not NaN converts to a float and back unchanged.
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float x = Bf16BitsToFloat(bits);
    if (std::isnan(x)) continue;
    ASSERT_EQ(FloatToBf16Bits(x), bits) << std::hex << b;
  }
}

TEST(Bf16Test, RoundsToNearestTiesToEven) {
  // 1 + 2^-8 lies exactly between 1 and 1 + 2^-7 (bf16 neighbours): ties go to the even one, 1.
  EXPECT_EQ(RoundToBf16(1.0f + 1.0f / 256), 1.0f);
  // 1 + 3 * 2^-8 lies between 1 + 2^-7 (odd) and 1 + 2^-6 (even): the tie goes up.
  EXPECT_EQ(RoundToBf16(1.0f + 3.0f / 256), 1.0f + 1.0f / 64);
  // Just above the tie goes up; just below goes down.
  EXPECT_EQ(RoundToBf16(std::nextafter(1.0f + 1.0f / 256, 2.0f)), 1.0f + 1.0f / 128);
  EXPECT_EQ(RoundToBf16(std::nextafter(1.0f + 1.0f / 256, 0.0f)), 1.0f);
  EXPECT_EQ(RoundToBf16(-(1.0f + 3.0f / 256)), -(1.0f + 1.0f / 64));
}

TEST(Bf16Test, NearestOfRandomValuesWithinHalfAnUlp) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1e4f, 1e4f);
  for (int i = 0; i < 100000; ++i) {
    const float x = dist(rng);
    const float r = RoundToBf16(x);
    // bf16 has 8 significant bits: the spacing at |x| is 2^(e - 7) for x in [2^e, 2^(e+1)).
    int e = 0;
    std::frexp(x, &e);
    const float ulp = std::ldexp(1.0f, e - 8);
    ASSERT_LE(std::fabs(r - x), ulp / 2) << x;
    ASSERT_EQ(RoundToBf16(r), r);
  }
}

TEST(Bf16Test, InfinityOverflowAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(RoundToBf16(inf), inf);
  EXPECT_EQ(RoundToBf16(-inf), -inf);
  EXPECT_EQ(RoundToBf16(std::numeric_limits<float>::max()), inf);  // rounds past bf16's max
  EXPECT_TRUE(std::isnan(RoundToBf16(std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload is only in the low 16 bits must not become an infinity.
  EXPECT_TRUE(std::isnan(RoundToBf16(FromBits(0x7f800001u))));
  EXPECT_TRUE(std::signbit(RoundToBf16(FromBits(0xff800001u))));
}

TEST(Bf16Test, ArrayConversions) {
  const float in[4] = {1.0f, -2.5f, 1.0f + 3.0f / 256, 65504.0f};
  uint16_t bits[4];
  float back[4];
  FloatToBf16Cpu(bits, in, 4);
  Bf16ToFloatCpu(back, bits, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back[i], RoundToBf16(in[i]));
  EXPECT_EQ(bits[0], 0x3f80);
}

}  // namespace
}  // namespace ringmaster::kernels
