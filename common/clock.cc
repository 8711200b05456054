#include "common/clock.h"

namespace ringmaster {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

Clock* Clock::Real() {
  static Clock* const clock = new RealClock();  // Intentionally leaked: used until exit.
  return clock;
}

}  // namespace ringmaster
