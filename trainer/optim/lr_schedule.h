// Learning rate per step: linear warmup to lr, then cosine decay to min_lr at the last step
// (llm.c's schedule).
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

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_OPTIM_LR_SCHEDULE_H_
