// Training batches from a TokenSource: deterministic, sharded by data-parallel rank, reshuffled
// every epoch, resumable from a saved position.
//
// The data is cut into samples of T+1 tokens at stride T (sample i is tokens [iT, iT+T]: inputs
// are the first T, targets the last T). Epoch e visits every sample once, in the order of a
// Fisher-Yates permutation seeded by (seed, e). The job consumes one global stream of samples:
// the step that starts at stream position p gives sample p + k*(B*D) + d*B + b to microbatch k,
// data-parallel rank d (of D), row b. So any data-parallel degree with the same global batch sees
// the same samples per step, each rank reads only its own, and the position (samples consumed
// by the whole job) is all a checkpoint needs to resume the exact order.
#ifndef RINGMASTER_TRAINER_DATA_DATA_LOADER_H_
#define RINGMASTER_TRAINER_DATA_DATA_LOADER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/token_source.h"

namespace ringmaster::trainer {

struct DataLoaderOptions {
  int seq_len = 0;     // T
  int micro_batch = 0; // B, sequences per rank per microbatch
  int dp_rank = 0;
  int dp_size = 1;
  uint64_t seed = 0;   // shuffle seed (trainer.data.seed)
};

// Not thread-safe.
class DataLoader {
 public:
  // INVALID_ARGUMENT naming trainer.data when the source holds fewer than T+1 tokens.
  static absl::StatusOr<std::unique_ptr<DataLoader>> Create(std::shared_ptr<const TokenSource> source,
                                                            DataLoaderOptions options);

  int64_t samples_per_epoch() const { return samples_; }
  // Samples consumed by the whole job so far.
  int64_t position() const { return position_; }
  void set_position(int64_t position) { position_ = position; }
  // Epoch of the next sample.
  int64_t epoch() const { return position_ / samples_; }

  // Writes microbatch `micro` of the step starting at position() for this rank: B*T inputs and
  // B*T targets.
  void Fill(int micro, int32_t* inputs, int32_t* targets);
  // Moves past a step of `micro_steps` microbatches on every rank.
  void Advance(int micro_steps) {
    position_ += int64_t{micro_steps} * options_.micro_batch * options_.dp_size;
  }

 private:
  DataLoader(std::shared_ptr<const TokenSource> source, DataLoaderOptions options, int64_t samples)
      : source_(std::move(source)), options_(options), samples_(samples) {}
  // The sample at global stream index g.
  int64_t SampleAt(int64_t g);

  std::shared_ptr<const TokenSource> source_;
  const DataLoaderOptions options_;
  const int64_t samples_;
  int64_t position_ = 0;
  std::map<int64_t, std::vector<uint32_t>> permutations_;  // at most two epochs cached
  std::vector<int32_t> window_;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_DATA_DATA_LOADER_H_
