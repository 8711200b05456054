#include "common/clock.h"

#include <chrono>

namespace ringmaster {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

class SteadyClock : public Clock {
 public:
  absl::Time Now() const override {
    return wall_at_start_ + absl::FromChrono(std::chrono::steady_clock::now() - start_);
  }

 private:
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  const absl::Time wall_at_start_ = absl::Now();
};

}  // namespace

Clock* Clock::Real() {
  static Clock* const clock = new RealClock();  // Intentionally leaked: used until exit.
  return clock;
}

Clock* Clock::Steady() {
  static Clock* const clock = new SteadyClock();  // Intentionally leaked: used until exit.
  return clock;
}

}  // namespace ringmaster
