// Data parallelism over one data-parallel group: bucketed gradient reduction that starts while
// the backward pass is still running, and the optimizer step, plain or ZeRO-sharded.
//
//  - Stage 0 (plain DP): each bucket is all-reduced (summed) as soon as the backward pass has
//    finished it; every rank then updates every parameter.
//  - Stage 1 (ZeRO-1): each bucket is reduce-scattered instead, leaving each rank the summed
//    gradients of the chunk it owns (buckets.h); optimizer state exists only for owned chunks;
//    after the update, each bucket's parameters are all-gathered from their owners.
//  - Stage 2 (ZeRO-2): as stage 1 (the gradient shard is all the optimizer reads). The
//    full-size gradient buffer is still the backward pass's workspace, so gradient memory is not
//    yet reduced; see docs/architecture.md.
//
// With gradient accumulation, gradients accumulate locally over a step's microbatches and are
// reduced once: the caller brackets only the last microbatch's backward pass with
// BeginReduction() / FinishReduction().
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

namespace ringmaster::trainer {

struct DataParallelOptions {
  int zero_stage = 0;                  // 0, 1 or 2
  int64_t bucket_bytes = 4 << 20;      // target bucket size
};

class DataParallel {
 public:
  // `dp` is this rank's data-parallel group (size 1: no communication) and must outlive this.
  // params and grads must hold PaddedSize(layout.size(), dp->size()) elements.
  static absl::StatusOr<std::unique_ptr<DataParallel>> Create(Device* device, Communicator* dp,
                                                             const ParameterLayout& layout,
                                                             Tensor params, Tensor grads,
                                                             DataParallelOptions options,
                                                             AdamWConfig adamw);

  // Before the backward pass of a step's last microbatch.
  void BeginReduction() { next_bucket_ = 0; }
  // During that pass: every gradient at offset >= low is final. Issues the buckets it completes.
  void OnGradientsFinal(int64_t low);
  // After that pass: issues the rest and waits. The owned gradients then hold sums over the
  // group. UNAVAILABLE / DEADLINE_EXCEEDED from the communicator.
  absl::Status FinishReduction();
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
  std::unique_ptr<AdamWOptimizer> optimizer_;
  std::unique_ptr<CommQueue> queue_;  // only when the group has more than one rank
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_PARALLEL_DATA_PARALLEL_H_
