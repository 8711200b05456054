#include "trainer/model/random.h"

#include <cmath>

namespace ringmaster::trainer {
namespace {

uint64_t SplitMix64(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(uint64_t seed) {
  for (uint64_t& word : s_) word = SplitMix64(&seed);
}

uint64_t Rng::NextU64() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t Rng::Below(uint64_t n) {
  // Rejection sampling on the top of the range keeps every value equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  for (;;) {
    const uint64_t x = NextU64();
    if (x < limit) return x % n;
  }
}

float Rng::NextFloat() { return static_cast<float>(NextU64() >> 40) / 16777216.0f; }

float Rng::NextNormal() {
  // u1 in (0, 1] so the log is finite.
  const double u1 = (static_cast<double>(NextU64() >> 11) + 1.0) / 9007199254740992.0;
  const double u2 = static_cast<double>(NextU64() >> 11) / 9007199254740992.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

uint64_t DeriveSeed(uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ SplitMix64(&stream);
  return SplitMix64(&x);
}

}  // namespace ringmaster::trainer
