// Learning rate per step: linear warmup to lr, then cosine decay to min_lr at the last step
// (llm.c's schedule); and the factor an elastic job keeping its per-replica batch multiplies it
// by (LrScaleRamp). Threading: values, pure functions; safe from any thread. Errors: none.
#ifndef RINGMASTER_TRAINER_OPTIM_LR_SCHEDULE_H_
#define RINGMASTER_TRAINER_OPTIM_LR_SCHEDULE_H_

#include <cstdint>

namespace ringmaster::trainer {

struct LrSchedule {
  double lr = 0;
  double min_lr = 0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  // Learning rate of optimizer step `step` (0-based): lr * (step + 1) / warmup during warmup,
  // then min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2 with progress from 0 to 1.
  double At(int64_t step) const;
};

// The learning-rate factor of an elastic job with elastic_batch per_replica (spec/elastic.h):
// the linear scaling rule's DP / full DP, ramped linearly after each change of data-parallel
// degree (Goyal et al. 2017). Step `start` is the first step at the new degree; over `steps`
// steps the factor goes from `from` (the one in use before) to `to`, as the schedule's warmup
// does: At(start + k) = from + (to - from) * (k + 1) / steps for k < steps, `to` after, `from`
// before start. The identity (from = to = 1) is the default, and every global-batch job's.
struct LrScaleRamp {
  int64_t start = 0;
  double from = 1;
  double to = 1;
  int64_t steps = 0;

  double At(int64_t step) const;
  bool identity() const { return from == 1 && to == 1; }

  // The ramp of a run resuming at step `step` (steps completed) with factor `target`, this one
  // being the ramp the checkpoint was trained under: this ramp itself when it already heads for
  // `target` (a restart at the same degree, also one in the middle of its ramp, goes on where it
  // was); else a new one from the factor of the last completed step, At(step - 1), to `target`
  // over `steps` steps from `step`.
  LrScaleRamp Retarget(int64_t step, double target, int64_t steps) const;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_OPTIM_LR_SCHEDULE_H_
