#include "trainer/checkpoint/state_partition.h"

#include "trainer/parallel/buckets.h"
#include "trainer/parallel/zero_regions.h"

namespace ringmaster::trainer {

int64_t ModelStatePartition::Padded(int dp_size) const {
  return PaddedSize(layout_.size(), dp_size);
}

std::vector<StateRange> ModelStatePartition::Owned(int dp_rank, int dp_size,
                                                   int64_t bucket) const {
  std::vector<FlatRange> owned;
  if (zero_stage_ == 0) {
    owned = {{0, Padded(dp_size)}};
  } else if (zero_stage_ == 1) {
    owned = OwnedRanges(PlanBuckets(layout_.size(), dp_size, bucket), dp_rank, dp_size);
  } else {
    owned = ZeroRegions(layout_, dp_rank, dp_size).owned();
  }
  std::vector<StateRange> out;
  out.reserve(owned.size());
  for (const FlatRange& r : owned) out.push_back({r.offset, r.size});
  return out;
}

}  // namespace ringmaster::trainer
