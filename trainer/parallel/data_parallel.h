// Data parallelism over one data-parallel group: bucketed gradient reduction that starts while
// the backward pass is still running, and the optimizer step, plain or ZeRO-sharded.
//
//  - Stage 0 (plain DP): each bucket is all-reduced (summed) as soon as the backward pass has
//    finished it; every rank then updates every parameter.
//  - Stage 1 (ZeRO-1): each bucket is reduce-scattered instead, leaving each rank the summed
//    gradients of the chunk it owns (buckets.h); optimizer state exists only for owned chunks;
//    after the update, each bucket's parameters are all-gathered from their owners.
//  - Stage 2 (ZeRO-2): gradients are sharded too: the model writes them through a
//    Zero2Gradients sink (zero2_gradients.h) that keeps only a window of layers at full size,
//    reduce-scatters each layer as it finishes, and accumulates this rank's shard.
//
// Gradient accumulation: stages 0 and 1 accumulate over a step's microbatches locally and reduce
// once, during the last microbatch's backward pass; stage 2 reduces the layers every microbatch
// (the embeddings and final norm once). The caller tells each microbatch's start with
// BeginMicrobatch(), passes OnGradientsFinal as the backward pass's callback, and calls
// FinishReduction() after the last one.
//
// The reductions run on a communication thread (comm_queue.h), in bucket order on every rank.
// Not thread-safe otherwise: one training thread calls the methods.
#ifndef RINGMASTER_TRAINER_PARALLEL_DATA_PARALLEL_H_
#define RINGMASTER_TRAINER_PARALLEL_DATA_PARALLEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/comm/communicator.h"
#include "trainer/model/device.h"
#include "trainer/model/parameter_layout.h"
#include "trainer/optim/adamw_optimizer.h"
#include "trainer/parallel/buckets.h"
#include "trainer/parallel/comm_queue.h"
#include "trainer/parallel/zero2_gradients.h"

namespace ringmaster::trainer {

struct DataParallelOptions {
  int zero_stage = 0;                  // 0, 1 or 2
  int64_t bucket_bytes = 4 << 20;      // target bucket size
};

class DataParallel {
 public:
  // `dp` is this rank's data-parallel group (size 1: no communication) and must outlive this.
  // params and (stages 0 and 1) grads must hold PaddedSize(layout.size(), dp->size()) elements;
  // stage 2 needs no grads buffer (the model writes through sink()).
  static absl::StatusOr<std::unique_ptr<DataParallel>> Create(Device* device, Communicator* dp,
                                                             const ParameterLayout& layout,
                                                             Tensor params, Tensor grads,
                                                             DataParallelOptions options,
                                                             AdamWConfig adamw);

  // Stage 2's gradient sink for the model; nullptr for stages 0 and 1.
  GradientSink* sink() { return zero2_.get(); }
  // Start of an optimizer step (before the first microbatch).
  void BeginStep();
  // Before each microbatch's backward pass; `last` for the step's last microbatch.
  void BeginMicrobatch(bool last);
  // During the backward pass: every gradient at offset >= low is final. Issues the reductions it
  // completes.
  void OnGradientsFinal(int64_t low);
  // After that pass: issues the rest and waits. The owned gradients then hold sums over the
  // group. UNAVAILABLE / DEADLINE_EXCEEDED from the communicator.
  absl::Status FinishReduction();
  // Sums *value (host memory) over the group on the communication thread, ahead of the step's
  // gradient reductions, so its latency hides behind the backward pass; the sum is there once
  // FinishReduction() returns. `value` must stay valid until then.
  void SumAsync(float* value);
  // L2 norm of the group's summed gradient.
  absl::StatusOr<double> GradientNorm();
  // AdamW on the owned ranges, then (ZeRO) the parameters gathered from their owners.
  absl::Status Step(float lr, int64_t t, float grad_scale);
  // Gathers every bucket's parameters from their owners (ZeRO; after loading owned state).
  absl::Status GatherParameters();

  AdamWOptimizer& optimizer() { return *optimizer_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  int zero_stage() const { return options_.zero_stage; }
  // Bytes this rank holds for parameters, gradients and optimizer state.
  int64_t state_bytes() const;

 private:
  DataParallel(Device* device, Communicator* dp, Tensor params, Tensor grads,
               DataParallelOptions options)
      : device_(device), dp_(dp), params_(params), grads_(grads), options_(options) {}
  void Issue(const Bucket& bucket);

  Device* const device_;
  Communicator* const dp_;
  const Tensor params_, grads_;
  const DataParallelOptions options_;
  std::vector<Bucket> buckets_;
  size_t next_bucket_ = 0;
  bool reducing_ = false;  // stages 0 and 1: in the last microbatch's backward pass
  std::unique_ptr<AdamWOptimizer> optimizer_;
  std::unique_ptr<CommQueue> queue_;  // only when the group has more than one rank
  std::unique_ptr<Zero2Gradients> zero2_;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_PARALLEL_DATA_PARALLEL_H_
