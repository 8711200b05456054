#include "trainer/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace ringmaster::trainer {

double LrSchedule::At(int64_t step) const {
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / warmup_steps;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps));
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

double LrScaleRamp::At(int64_t step) const {
  if (step < start) return from;
  if (steps <= 0 || step - start + 1 >= steps) return to;
  return from + (to - from) * static_cast<double>(step - start + 1) / static_cast<double>(steps);
}

LrScaleRamp LrScaleRamp::Retarget(int64_t step, double target, int64_t ramp_steps) const {
  if (to == target) return LrScaleRamp{start, from, to, ramp_steps};
  return LrScaleRamp{step, At(step - 1), target, ramp_steps};
}

}  // namespace ringmaster::trainer
