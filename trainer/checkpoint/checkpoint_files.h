// The on-disk form of a checkpoint.
//
//   DIR/step-00000050/rank-00003.bin   one file per rank (its state; see RankState)
//   DIR/step-00000050/MANIFEST         written last, by rank 0, once every rank's file is durable
//
// Every file is written to a temporary name, fsynced, renamed into place, and its directory
// fsynced, so a crash leaves either the old file or the new one. A checkpoint exists only once
// its MANIFEST does; the MANIFEST lists every rank file with its size and CRC-32C, so a torn,
// truncated or corrupted file is detected when the checkpoint is chosen for a resume.
//
// MANIFEST is text:
//   ringmaster-checkpoint 1
//   step 50
//   layout world=4 tp=1 pp=1 dp=4 zero=1 params=12345 padded=12352 bucket=1048576
//   file 0 rank-00000.bin 4242 1a2b3c4d        (rank, name, bytes, CRC-32C in hex)
//   ...
// A rank file is a header ("RMCKPT01", step, rank, layout) and named sections, all
// little-endian: "meta" (data position and seed), and "master", "m", "v" (fp32 optimizer state
// of the ranges this rank owns; absent in files that hold no model state).
#ifndef RINGMASTER_TRAINER_CHECKPOINT_CHECKPOINT_FILES_H_
#define RINGMASTER_TRAINER_CHECKPOINT_CHECKPOINT_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ringmaster::trainer {

// The parallel layout a checkpoint was written under. A resume at the same layout reads it as it
// is; one that differs only in the data-parallel degree (dp, and with it world, padded and the
// partition of the state) is resharded (reshard.h); any other difference is refused.
struct CheckpointLayout {
  int world = 1, tp = 1, pp = 1, dp = 1, zero = 0;
  int64_t params = 0;  // parameters per model shard (ParameterLayout::size())
  int64_t padded = 0;  // flat buffer length (PaddedSize)
  // ZeRO-1's gradient bucket length in elements, which decides the chunks each DP rank owns
  // (parallel/buckets.h); 0 under the other stages, and in ZeRO-1 checkpoints written before it
  // was recorded (a resume then assumes its own). Written as " bucket=N" only when not 0.
  int64_t bucket = 0;

  std::string ToString() const;
  bool operator==(const CheckpointLayout& o) const { return ToString() == o.ToString(); }
};

// What one rank saves and restores.
struct RankState {
  int64_t step = 0;           // optimizer steps completed
  int64_t data_position = 0;  // samples the job consumed (DataLoader::position)
  uint64_t data_seed = 0;     // the shuffle seed those samples were drawn with
  // The learning-rate factor of an elastic job keeping its per-replica batch (LrScaleRamp):
  // steps from lr_scale_start go from lr_scale_from to lr_scale_to. The identity (1, 1) is not
  // written (the file then reads as one from before these fields); any other is, in an
  // "lr_scale" section that trainers older than it cannot read.
  int64_t lr_scale_start = 0;
  double lr_scale_from = 1;
  double lr_scale_to = 1;
  std::vector<float> master, m, v;  // empty when the file holds no model state
};

struct ManifestFile {
  int rank = 0;
  std::string name;
  int64_t bytes = 0;
  uint32_t crc32c = 0;
};

struct Manifest {
  int64_t step = 0;
  CheckpointLayout layout;
  std::vector<ManifestFile> files;  // one per rank, by rank
};

// "step-00000050".
std::string StepDirName(int64_t step);
// "rank-00003.bin".
std::string RankFileName(int rank);

// Writes `contents` to `path` durably: temporary name, fsync, rename, fsync of the directory.
absl::Status WriteFileDurably(const std::string& path, const std::string& contents);

// Writes rank `rank`'s state to `path` durably; returns its size and CRC-32C.
absl::StatusOr<ManifestFile> WriteRankFile(const std::string& path, int rank,
                                           const CheckpointLayout& layout, const RankState& state);
// Reads a rank file in one pass, checking its size and CRC-32C against `expected`, and its header
// against `layout` and `step`. DATA_LOSS for a damaged file; FAILED_PRECONDITION for an intact
// one written for another step, rank or layout.
absl::StatusOr<RankState> ReadRankFile(const std::string& path, const ManifestFile& expected,
                                       const CheckpointLayout& layout, int64_t step);
// Size and CRC-32C of a file as it is on disk.
absl::StatusOr<ManifestFile> ChecksumFile(const std::string& path);

std::string FormatManifest(const Manifest& manifest);
// DATA_LOSS naming the line for anything malformed.
absl::StatusOr<Manifest> ParseManifest(const std::string& text);

// DIR/OWNER: the job generation that last claimed the directory (Checkpointer::Resume), so that
// an older generation of the same job still running stops instead of writing next to it:
//   ringmaster-checkpoint-owner 1
//   job gpt-small-1a2b
//   generation 3
struct CheckpointOwner {
  std::string job;
  int64_t generation = 0;
};

std::string FormatOwner(const CheckpointOwner& owner);
// DATA_LOSS naming the line for anything malformed.
absl::StatusOr<CheckpointOwner> ParseOwner(const std::string& text);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CHECKPOINT_CHECKPOINT_FILES_H_
