// Checkpoints of a training job: every rank writes its own file in the background while training
// goes on; rank 0 commits the checkpoint with a MANIFEST once every rank's file is durable
// (checkpoint_files.h); a resume starts from the newest checkpoint whose files the ranks that
// need them read and verify (Resume()).
//
// Save() takes a snapshot the caller has already copied out of the model (so the training step is
// blocked only for that copy) and returns at once; the write, the gathering of every rank's
// size and checksum over the job-wide communicator, the MANIFEST and the pruning of old
// checkpoints happen on a writer thread. A Save() while the previous checkpoint is still being
// written first waits for it.
//
// A checkpoint that is not committed (a rank could not write its file, or rank 0 its MANIFEST:
// a full disk, a lost mount) leaves nothing behind: rank 0 removes its step directory, each other
// rank its own file. Training goes on, the next checkpoint tries again, and each rank whose own
// write failed hands the failure to the caller (TakeFailures) to report; with
// options.max_consecutive_failures > 0, that many failures in a row end the run on every rank
// (FAILED_PRECONDITION, from Save or Flush).
//
// Threading: one training thread calls the methods. The communicator passed in is used by
// Resume() on the calling thread (before any Save) and afterwards only by the writer
// thread; nothing else may use it. Every rank of the job calls Resume() and Save() at the
// same points, in the same order.
#ifndef RINGMASTER_TRAINER_CHECKPOINT_CHECKPOINTER_H_
#define RINGMASTER_TRAINER_CHECKPOINT_CHECKPOINTER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "trainer/checkpoint/checkpoint_files.h"
#include "trainer/checkpoint/reshard.h"
#include "trainer/comm/communicator.h"

namespace ringmaster::trainer {

struct CheckpointOptions {
  std::string dir;
  int every_steps = 0;  // 0: no periodic checkpoints
  int keep = 3;         // complete checkpoints kept
  // Who writes (RINGMASTER_JOB, RINGMASTER_GENERATION). With a generation > 0, rank 0 claims the
  // directory for it when it resumes (DIR/OWNER, checkpoint_files.h), and a generation finding
  // that a newer one of the same job has claimed it stops (ABORTED) instead of resuming or
  // committing: one that went on running while the job was restarted elsewhere (its node cut
  // off from the coordinator) neither commits nor prunes next to the new generation. A claim
  // by another job (a resubmission continuing from the same directory) takes it over, and
  // stops the previous job's generations the same way.
  std::string job;
  int64_t generation = 0;
  // CheckpointSpec.max_consecutive_failures: 0 keeps training whatever fails; N > 0 fails the
  // run once N checkpoints in a row were not committed.
  int max_consecutive_failures = 0;
};

// A checkpoint committed by rank 0, as every rank learns of it.
struct CommittedCheckpoint {
  int64_t step = 0;
  double seconds = 0;  // from Save() to the commit
};

// A checkpoint this rank could not save: its own file, or (rank 0) the MANIFEST. Ranks whose
// own part succeeded have none for it, so one failed checkpoint may be reported by several ranks.
struct CheckpointFailure {
  int64_t step = 0;
  absl::Status error;
  int consecutive = 0;  // checkpoints in a row not committed, this one included (every rank alike)
};

class Checkpointer {
 public:
  // `ctl` spans every rank of the job (rank() == this rank's global rank) and outlives this.
  // `layout` is this rank's (its model shard's sizes). `partition` (borrowed, may be null: no
  // resharding) is this rank's model shard's, for resuming a checkpoint of another
  // data-parallel degree.
  Checkpointer(CheckpointOptions options, CheckpointLayout layout, Communicator* ctl,
               const StatePartition* partition = nullptr);
  // Waits for a checkpoint in progress.
  ~Checkpointer();

  const CheckpointOptions& options() const { return options_; }
  bool Due(int64_t step) const {
    return options_.every_steps > 0 && step % options_.every_steps == 0;
  }

  // Loads the newest checkpoint that every rank can read, the same step on every rank, each rank
  // the file of `source_rank` (its own under ZeRO; its data-parallel rank 0's in plain data
  // parallelism); nullopt when there is none. Rank 0 proposes the committed steps, newest
  // first, whose MANIFEST parses and whose files all have their listed sizes; every rank then
  // reads and verifies (size, CRC-32C, header) the one file it needs, all at once. If any rank
  // finds its file damaged (DATA_LOSS), every rank moves on to the next older step, each skip
  // logged. So a resume reads each file once, by the ranks that need it, in parallel: not every
  // file by rank 0 first. A ZeRO-1 checkpoint that did not record its bucket is read as one of
  // the run's bucket (SameLayout). A checkpoint whose layout differs from this run's only in the
  // data-parallel degree (CheckReshardable) is resharded when a partition was given: each rank
  // reads and verifies the old files holding its new ranges (reshard.h's PlanReshard; under
  // ZeRO-0 the old DP rank 0's of its (tp, pp) position, as `source_rank` would name) and
  // assembles its state, one file at a time; `source_rank` is then unused. Errors end it on
  // every rank: FAILED_PRECONDITION when the checkpoint was written under a layout this run
  // cannot take (another tp, pp, ZeRO stage or model; another dp without a partition: rank 0
  // finds it in the MANIFEST, any rank in its file's header: a restart cannot fix that); a
  // rank's other read error (I/O, permission) on
  // that rank, ABORTED on the others; UNAVAILABLE when the communicator fails; ABORTED on every
  // rank when a newer generation has claimed the directory (options.generation). Otherwise rank 0
  // first claims the directory for this generation, then removes every step directory without a
  // MANIFEST: what an earlier run left of checkpoints it never committed (it was killed while
  // writing); no other run writes there any more (a stale generation stops at its next write or
  // commit, CheckOwner).
  absl::StatusOr<std::optional<RankState>> Resume(int source_rank);

  // Starts writing `state` (state.step is the checkpoint's step) on the writer thread, which
  // checks the directory's owner (CheckOwner) before writing. Returns the error of the previous
  // checkpoint's writing, if it failed (the job must restart): ABORTED on every rank when a rank
  // found, before writing its file, or rank 0 before committing, the directory claimed by a newer
  // generation of this job or by another job; FAILED_PRECONDITION naming checkpoint.dir and the
  // last error when options.max_consecutive_failures checkpoints in a row were not committed
  // (every rank alike).
  absl::Status Save(RankState state);
  // Waits for the checkpoint in progress; returns its error as Save() does.
  absl::Status Flush();
  // Whether a checkpoint's writing has failed (Flush or Save would return the error), without
  // waiting. Thread-safe.
  bool failed() const;
  // The newest checkpoint committed since the last call, if any.
  std::optional<CommittedCheckpoint> TakeCommitted();
  // The checkpoints this rank could not save since the last call, oldest first. Thread-safe.
  std::vector<CheckpointFailure> TakeFailures();

 private:
  // The writer thread's work for one checkpoint.
  absl::Status Write(const RankState& state, double start_seconds);
  // Rank 0: writes the MANIFEST, then prunes.
  absl::Status Commit(int64_t step, const std::vector<ManifestFile>& files);
  // ABORTED if a newer generation of this job has claimed the directory, or (without `claim`)
  // another job has; with `claim` (rank 0, resuming), then claims it for this generation (a
  // failed claim is logged: the fence is off, not the training). An unreadable OWNER is logged
  // and ignored. Does nothing without a generation. Every rank checks before writing its file
  // of a checkpoint, rank 0 again before the MANIFEST.
  absl::Status CheckOwner(bool claim);
  absl::Status Prune();
  // Removes the step directories without a MANIFEST (all, or those older than `before`).
  void RemoveUncommitted(int64_t before) const;
  // After checkpoint `step` was not committed: rank 0 removes its directory, another rank its
  // own file there (and the directory, where the file was all it held: a directory not shared).
  void RemoveFailed(int64_t step) const;
  // Steps with a MANIFEST, newest first.
  std::vector<int64_t> CommittedSteps() const;
  // Checkpoint `step`'s MANIFEST, which must name that step.
  absl::StatusOr<Manifest> ReadManifest(int64_t step) const;
  // Rank 0: the MANIFEST, if every file it lists has its listed size (not yet its CRC-32C).
  absl::StatusOr<Manifest> CheckSizes(int64_t step) const;
  // Reads rank `source_rank`'s file of checkpoint `step`, verifying it against the MANIFEST.
  absl::StatusOr<RankState> Load(int64_t step, int source_rank);
  // Assembles this rank's state from the files of checkpoint `step`, written at another
  // data-parallel degree (reshard.h).
  absl::StatusOr<RankState> LoadResharded(int64_t step);
  std::string StepDir(int64_t step) const;

  const CheckpointOptions options_;
  const CheckpointLayout layout_;
  Communicator* const ctl_;
  const StatePartition* const partition_;
  std::thread writer_;
  mutable absl::Mutex mu_;
  absl::Status writer_status_ ABSL_GUARDED_BY(mu_);
  std::optional<CommittedCheckpoint> committed_ ABSL_GUARDED_BY(mu_);
  std::vector<CheckpointFailure> failures_ ABSL_GUARDED_BY(mu_);
  // Checkpoints not committed in a row; used by the writer thread only (one at a time).
  int consecutive_failures_ = 0;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CHECKPOINT_CHECKPOINTER_H_
