// Data parallelism over one data-parallel group, for one model shard (the whole model, or a
// tensor-parallel slice of a pipeline stage): bucketed gradient reduction that starts while the
// backward pass is still running, and the optimizer step, plain or ZeRO-sharded.
//
//  - Stage 0 (plain DP): each bucket is all-reduced (summed) as soon as the backward pass has
//    finished it; every rank then updates every parameter.
//  - Stage 1 (ZeRO-1): each bucket is reduce-scattered instead, leaving each rank the summed
//    gradients of the chunk it owns (buckets.h); optimizer state exists only for owned chunks;
//    after the update, each bucket's parameters are all-gathered from their owners.
//  - Stage 2 (ZeRO-2): gradients are sharded too: the model writes them through a
//    Zero2Gradients sink (zero2_gradients.h) that keeps only a window of layers at full size,
//    reduce-scatters each layer as it finishes, and accumulates this rank's shard.
//  - Stage 3 (ZeRO-3 / FSDP): parameters are sharded as well: the model reads them through a
//    Zero3Parameters source (zero3_parameters.h) that gathers each layer just before its forward
//    and its backward pass; gradients as in stage 2; the optimizer updates the shard in place.
//
// Gradient accumulation: stages 0 and 1 accumulate over a step's microbatches locally and reduce
// once, during the last microbatch's backward pass; stages 2 and 3 reduce the layers every
// microbatch (the embeddings and final norm once). The caller tells each microbatch's start with
// BeginMicrobatch(), passes OnGradientsFinal as the backward pass's callback, and calls
// FinishReduction() after the last one.
//
// Pipeline parallelism with the tied embedding: the first stage (embedding) and the last (LM
// head) both hold wte. Given `tied_embedding` (their two-rank group, the first stage as rank 0),
// wte's gradient is summed over it in FinishReduction, after the step's last backward pass and
// before the data-parallel reduction of the ranges holding wte (which wait for it), and after
// each optimizer step the first stage's wte is broadcast to the last, so the two copies never
// drift apart (rounding could otherwise differ, because the two stages' data-parallel
// reductions split the buffer differently).
//
// The gradient norm is the whole model's: replicated tensor-parallel tensors are counted on TP
// rank 0 only, the tied wte on the first stage only, and the sum runs over the data-parallel
// group (ZeRO) and the `model_groups` (tensor and pipeline groups).
//
// The reductions run on a communication thread (comm_queue.h), in bucket order on every rank.
// The tied-embedding and norm collectives run on the calling thread. Not thread-safe otherwise:
// one training thread calls the methods.
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
#include "trainer/parallel/zero3_parameters.h"

namespace ringmaster::trainer {

struct DataParallelOptions {
  int zero_stage = 0;              // 0, 1, 2 or 3
  int64_t bucket_bytes = 4 << 20;  // target bucket size (stages 0 and 1)
  // The first and last pipeline stages' group for the tied embedding (see above); nullptr
  // without pipeline parallelism. Borrowed.
  Communicator* tied_embedding = nullptr;
  // The other groups the model is split over (tensor, pipeline), for the gradient norm.
  std::vector<Communicator*> model_groups;
};

class DataParallel {
 public:
  // `dp` is this rank's data-parallel group (size 1: no communication) and must outlive this.
  // Stages 0-2: params and (stages 0 and 1) grads must hold PaddedSize(layout.size(), dp->size())
  // elements; stage 2 needs no grads buffer (the model writes through sink()); stage 3 needs
  // neither (the model reads through source()). INVALID_ARGUMENT naming trainer.zero_stage for a
  // stage outside 0-3.
  static absl::StatusOr<std::unique_ptr<DataParallel>> Create(Device* device, Communicator* dp,
                                                             const ParameterLayout& layout,
                                                             Tensor params, Tensor grads,
                                                             DataParallelOptions options,
                                                             AdamWConfig adamw);
  // Ends the communication thread first: after a failure (Abandon) it may still be running a
  // collective into the ZeRO buffers, which must outlive it.
  ~DataParallel();

  // Stages 2 and 3's gradient sink for the model; nullptr otherwise.
  GradientSink* sink() { return zero2_.get(); }
  // Stage 3's parameter source for the model; nullptr otherwise.
  Zero3Parameters* source() { return zero3_.get(); }
  // Start of an optimizer step (before the first microbatch).
  void BeginStep();
  // Before each microbatch's backward pass; `last` for the step's last microbatch.
  void BeginMicrobatch(bool last);
  // During the backward pass: every gradient at offset >= low is final. Issues the reductions it
  // completes.
  void OnGradientsFinal(int64_t low);
  // After that pass: issues the rest and waits. The owned gradients then hold sums over the
  // group. UNAVAILABLE / DEADLINE_EXCEEDED from the communicators.
  absl::Status FinishReduction();
  // Sums *value (host memory) over the group on the communication thread, ahead of the step's
  // remaining gradient reductions; the sum is there once FinishReduction() returns. `value` must
  // stay valid until then.
  void SumAsync(float* value);
  // L2 norm of the whole model's summed gradient (see above).
  absl::StatusOr<double> GradientNorm();
  // AdamW on the owned ranges, then (ZeRO) the parameters gathered from their owners, then the
  // tied embedding made equal on both pipeline ends.
  absl::Status Step(float lr, int64_t t, float grad_scale);
  // Gathers the parameters from their owners (ZeRO; after loading or initialising owned state)
  // and makes the tied embedding equal on both pipeline ends.
  absl::Status GatherParameters();

  // The run failed: queued reductions not yet started are skipped (their peers may be gone),
  // so that tearing this down does not wait for them. Thread-safe.
  void Abandon();

  AdamWOptimizer& optimizer() { return *optimizer_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  int zero_stage() const { return options_.zero_stage; }
  // The bucket length PlanBuckets was given (options' bucket_bytes in the compute dtype).
  int64_t bucket_elements() const { return bucket_elements_; }
  // The communication thread's queue; nullptr when the group has one rank.
  CommQueue* queue() { return queue_.get(); }
  // Bytes this rank holds for parameters, gradients and optimizer state.
  int64_t state_bytes() const;

 private:
  DataParallel(Device* device, Communicator* dp, Tensor params, Tensor grads,
               DataParallelOptions options)
      : device_(device), dp_(dp), params_(params), grads_(grads), options_(std::move(options)) {}
  void Issue(const Bucket& bucket);
  // The tied embedding's gradient / parameters, wherever this stage keeps them.
  Tensor TiedGradients();
  Tensor TiedParameters();
  absl::Status SyncTiedParameters();

  Device* const device_;
  Communicator* const dp_;
  const Tensor params_, grads_;
  const DataParallelOptions options_;
  std::vector<Bucket> buckets_;
  int64_t bucket_elements_ = 0;
  size_t next_bucket_ = 0;
  bool last_microbatch_ = false;  // in the last microbatch's backward pass
  FlatRange tied_;                // wte, when options_.tied_embedding is set
  bool tied_reduced_ = false;     // this step's tied gradient sum is done
  std::vector<bool> counted_;     // per layout tensor: counted in the gradient norm
  std::unique_ptr<AdamWOptimizer> optimizer_;
  std::unique_ptr<CommQueue> queue_;  // only when the group has more than one rank
  std::unique_ptr<Zero2Gradients> zero2_;
  std::unique_ptr<Zero3Parameters> zero3_;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_PARALLEL_DATA_PARALLEL_H_
