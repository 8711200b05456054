// Resharding a checkpoint to another data-parallel degree: a checkpoint written at DP=a resumes
// at DP=b, for ZeRO 0/1/2/3, with TP, PP, the ZeRO stage and the model unchanged.
//
// Each rank's optimizer state ("master", "m", "v" in its file, checkpoint_files.h) is the
// concatenation, in state order, of the flat ranges of its model shard's buffer that it owns.
// Which ranges a DP rank owns depends on the DP degree (the padded length, the buckets of ZeRO-1,
// the chunks of ZeRO-2/3's regions): a StatePartition answers for any degree, as the trainer
// computes it for its own (state_partition.h). Resharding maps by flat offset: a new rank's
// state element at flat offset o is the element at o in whichever old rank's state held o.
// Offsets at or past `params` are padding: never copied, zero in the new state (as a fresh
// optimizer has them). The data position, seed and step come from the old files unchanged:
// the data loader's sample order depends only on the global position and global batch
// (data/data_loader.h), so no sample is skipped or seen twice.
//
// Pure functions; thread-compatible. Errors: FAILED_PRECONDITION naming what differs for
// layouts that cannot be resharded, or an old file whose state does not have the size its
// partition says; DATA_LOSS when the old files disagree on the step, data position or seed.
#ifndef RINGMASTER_TRAINER_CHECKPOINT_RESHARD_H_
#define RINGMASTER_TRAINER_CHECKPOINT_RESHARD_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/checkpoint/checkpoint_files.h"

namespace ringmaster::trainer {

// A range [offset, offset + size) of a model shard's flat buffer.
struct StateRange {
  int64_t offset = 0;
  int64_t size = 0;
};

// How one model shard's optimizer state is partitioned over its data-parallel ranks, at any
// degree. Implementations must be thread-compatible and answer the same for the same arguments.
class StatePartition {
 public:
  virtual ~StatePartition() = default;
  // The flat buffer's length at `dp_size` (the layout's "padded").
  virtual int64_t Padded(int dp_size) const = 0;
  // The flat ranges DP rank `dp_rank` of `dp_size` keeps state for, ascending, in state order
  // (ZeRO-0: the whole padded buffer). `bucket` is the layout's ZeRO-1 bucket length.
  virtual std::vector<StateRange> Owned(int dp_rank, int dp_size, int64_t bucket) const = 0;
};

// OK when a checkpoint written under `saved` (its MANIFEST's layout, rank 0's shard) can resume
// under `now` (this run's rank 0 layout): the same tp, pp, zero stage and shard size, and a
// world of tp*pp*dp on both sides; dp, padded and bucket may differ. Otherwise
// FAILED_PRECONDITION naming each field that differs.
absl::Status CheckReshardable(const CheckpointLayout& saved, const CheckpointLayout& now);

// Whether a checkpoint of MANIFEST layout `saved` is this run's layout `now` as it stands, to be
// read without resharding. A ZeRO-1 checkpoint written before the bucket was recorded (bucket 0:
// no " bucket=") was written with the run's bucket, so it matches when all else does.
bool SameLayout(const CheckpointLayout& saved, const CheckpointLayout& now);

// Copy `size` state elements from offset `from` of an old rank's state to offset `to` of the
// new rank's.
struct ReshardPiece {
  int64_t from = 0, to = 0, size = 0;
};

// One old rank file a new rank reads, and what it takes from it.
struct ReshardSource {
  int rank = 0;               // the old global rank (its file: rank-R.bin)
  CheckpointLayout layout;    // the header that file must carry (its shard's params and padded)
  int64_t state_size = 0;     // the elements of "master"/"m"/"v" it must hold
  std::vector<ReshardPiece> pieces;
};

// What one new rank reads and assembles.
struct ReshardPlan {
  int64_t state_size = 0;  // elements of the new rank's state
  std::vector<ReshardSource> sources;  // by old rank, ascending; only those with pieces
};

// The plan of new global rank `rank` under `now` (its own shard's layout) from a checkpoint of
// MANIFEST layout `saved`. `partition` is this rank's model shard's. Under ZeRO-0 the state is
// in the old DP rank 0's file of the same (tp, pp) position; otherwise in those of the old DP
// ranks whose ranges overlap this rank's. FAILED_PRECONDITION as CheckReshardable (except the
// shard size, which differs by stage: each source's header is checked when read), or when the
// old partition does not cover this rank's ranges.
absl::StatusOr<ReshardPlan> PlanReshard(const CheckpointLayout& saved, const CheckpointLayout& now,
                                        int rank, const StatePartition& partition);

// Reads the plan's sources one at a time through `read` (which verifies the file) and assembles
// the new state: every element the plan does not copy is zero. `read`'s errors are returned as
// they are; FAILED_PRECONDITION for a source whose state has another size than planned;
// DATA_LOSS when the sources disagree on step, data position or seed.
absl::StatusOr<RankState> AssembleState(
    const ReshardPlan& plan,
    const std::function<absl::StatusOr<RankState>(const ReshardSource&)>& read);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CHECKPOINT_RESHARD_H_
