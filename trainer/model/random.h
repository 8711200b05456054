// A small deterministic random number generator (xoshiro256**, seeded through splitmix64) with
// a Box-Muller normal, so initialisation and data order are bit-identical on every machine and
// standard library (std::normal_distribution is implementation-defined). Its state is four
// words, saved in checkpoints. Not thread-safe; one per user.
#ifndef RINGMASTER_TRAINER_MODEL_RANDOM_H_
#define RINGMASTER_TRAINER_MODEL_RANDOM_H_

#include <array>
#include <cstdint>

namespace ringmaster::trainer {

class Rng {
 public:
  explicit Rng(uint64_t seed);

  uint64_t NextU64();
  // Uniform in [0, n) (n >= 1), without modulo bias.
  uint64_t Below(uint64_t n);
  // Uniform in [0, 1), 24 random bits.
  float NextFloat();
  // Standard normal (Box-Muller; one of each pair is discarded, keeping the state simple).
  float NextNormal();

  std::array<uint64_t, 4> state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& state) { s_ = state; }

 private:
  std::array<uint64_t, 4> s_;
};

// A seed for stream `stream` derived from `seed` (splitmix64 of both), for independent streams
// such as one per parameter tensor or per epoch.
uint64_t DeriveSeed(uint64_t seed, uint64_t stream);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_MODEL_RANDOM_H_
