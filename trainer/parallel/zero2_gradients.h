// ZeRO-2 gradients (also ZeRO-3's): each data-parallel rank keeps only the gradients of the
// parameters it owns, plus a bounded window of full-size gradients for the layers the backward
// pass is working on.
//
// The model shard (any pipeline stage or tensor-parallel slice) is cut into regions
// (zero_regions.h): the outer ranges (embeddings before the first layer, final LayerNorm after
// the last, where the shard has them) and each layer.
//
//  - Layers: the backward pass writes layer i's gradients into workspace i % 2 (two buffers of
//    the largest padded layer). When the layer is done, its workspace is reduce-scattered on the
//    communication thread, and each rank adds its chunk to its shard of accumulated gradients;
//    before layer i - 2 reuses the workspace, that reduction is waited for. Layers are reduced in
//    every microbatch (DeepSpeed's ZeRO-2 trade: with gradient accumulation, the layers'
//    gradients are communicated per microbatch so they never need full-size storage).
//  - The outer regions keep full-size buffers: the tied token embedding gathers gradients from
//    the LM head at the start of the backward pass and from the input embedding at its end (and,
//    under pipeline parallelism, from the other end of the pipeline before it is reduced). They
//    accumulate over the step's microbatches and are reduce-scattered once, during the last one.
//
// Gradient memory per rank is therefore the outer regions + 2 layers + 1/dp of the shard,
// instead of the whole shard; bytes() counts it. The optimizer reads the shard (compact, in
// owned-range order). For ZeRO-2, GatherParameters() all-gathers the updated parameters region
// by region, with the region's gradient buffer as staging.
//
// One training thread calls everything; the reductions run on the given CommQueue.
#ifndef RINGMASTER_TRAINER_PARALLEL_ZERO2_GRADIENTS_H_
#define RINGMASTER_TRAINER_PARALLEL_ZERO2_GRADIENTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/comm/communicator.h"
#include "trainer/model/gpt.h"
#include "trainer/optim/adamw_optimizer.h"
#include "trainer/parallel/comm_queue.h"
#include "trainer/parallel/zero_regions.h"

namespace ringmaster::trainer {

class Zero2Gradients final : public GradientSink {
 public:
  // `dp` and `queue` (which runs the reductions) must outlive this; `queue` may be null when
  // dp has one rank. INVALID_ARGUMENT when the shard holds no layer.
  static absl::StatusOr<std::unique_ptr<Zero2Gradients>> Create(Device* device, Communicator* dp,
                                                               CommQueue* queue,
                                                               const ParameterLayout& layout);

  const ZeroRegions& regions() const { return regions_; }
  // The flat ranges this rank owns, ascending: the optimizer's owned ranges.
  const std::vector<FlatRange>& owned() const { return owned_; }
  // The accumulated, group-summed gradients of the owned ranges, in their order.
  Tensor shard() const { return shard_.tensor(); }

  // Start of an optimizer step: zero the accumulated gradients.
  void BeginStep();
  // Start of a microbatch's backward pass.
  void BeginMicrobatch(bool last) {
    last_microbatch_ = last;
    next_final_ = 0;
  }
  // During it: every gradient at flat offset >= low is final for this microbatch.
  void OnGradientsFinal(int64_t low);
  // After the last microbatch's backward pass: waits for every reduction and folds the results
  // into the shard.
  absl::Status Finish();
  // ZeRO-2: gathers every region's parameters from their owners into `params` (flat layout).
  absl::Status GatherParameters(Tensor params);
  // Bytes of gradient memory this rank holds.
  int64_t bytes() const;

  // GradientSink.
  absl::Status BeginLayer(int layer) override;
  Tensor Gradients(int64_t offset, int64_t size) override;

 private:
  // Per region: where its gradients live and its pending reduction.
  struct Buffers {
    Tensor buffer;       // full-size gradients (a workspace for layers)
    Tensor chunk;        // reduce-scatter output
    int64_t ticket = 0;  // pending reduction, 0 when none, -1 when done without communication
  };
  Zero2Gradients(Device* device, Communicator* dp, CommQueue* queue, const ParameterLayout& layout)
      : device_(device), dp_(dp), queue_(queue), regions_(layout, dp->rank(), dp->size()) {}
  void Reduce(int region);
  // Waits for the region's reduction and adds its chunk into the shard.
  absl::Status Fold(int region);

  Device* const device_;
  Communicator* const dp_;
  CommQueue* const queue_;
  const ZeroRegions regions_;
  std::vector<Buffers> buffers_;  // by region
  std::vector<FlatRange> owned_;
  DeviceBuffer outer_, workspaces_, chunks_, shard_;
  bool last_microbatch_ = true;
  int next_final_ = 0;                // regions are final from the last one backwards
  int workspace_user_[2] = {-1, -1};  // region whose gradients each workspace holds
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_PARALLEL_ZERO2_GRADIENTS_H_
