// The trainer's partition of a model shard's optimizer state over its data-parallel ranks, at
// any degree (reshard.h's StatePartition), computed as parallel/data_parallel.cc computes its
// own: ZeRO-0 keeps the whole padded buffer on every rank; ZeRO-1 one chunk of every gradient
// bucket (parallel/buckets.h); ZeRO-2/3 one chunk of every region (parallel/zero_regions.h).
//
// Immutable after construction; thread-safe.
#ifndef RINGMASTER_TRAINER_CHECKPOINT_STATE_PARTITION_H_
#define RINGMASTER_TRAINER_CHECKPOINT_STATE_PARTITION_H_

#include <cstdint>
#include <vector>

#include "trainer/checkpoint/reshard.h"
#include "trainer/model/parameter_layout.h"

namespace ringmaster::trainer {

class ModelStatePartition : public StatePartition {
 public:
  // `layout` is the model shard's (copied); `zero_stage` 0-3.
  ModelStatePartition(const ParameterLayout& layout, int zero_stage)
      : layout_(layout), zero_stage_(zero_stage) {}

  int64_t Padded(int dp_size) const override;
  std::vector<StateRange> Owned(int dp_rank, int dp_size, int64_t bucket) const override;

  // The layout's "bucket" for a ZeRO-1 run whose DataParallel plans buckets of
  // `bucket_elements` (<= 0: one bucket, recorded as the shard's size, which plans the same).
  static int64_t RecordedBucket(int64_t bucket_elements, int64_t params) {
    return bucket_elements > 0 ? bucket_elements : params;
  }

 private:
  const ParameterLayout layout_;
  const int zero_stage_;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CHECKPOINT_STATE_PARTITION_H_
