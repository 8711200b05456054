// ZeRO-3 / FSDP parameters: each data-parallel rank keeps only its shard of the parameters (the
// owned parts of every region, zero_regions.h), and the model reads a layer's full parameters
// from a gather window while it runs that layer.
//
//  - Layers: before a pass (forward or backward) uses a layer, its parameters are all-gathered
//    from the owners into one of two window buffers (the largest padded layer each); when the
//    pass releases the layer the buffer is free again. Acquiring a layer also starts the gather
//    of the pass's next layer (forward: ascending, backward: descending) on the communication
//    thread as soon as a window is free, so it overlaps the current layer's compute. So each
//    layer is gathered just before its forward and again before its backward in every
//    microbatch, and at most two layers are ever held in full.
//  - The outer regions (embeddings, final LayerNorm; FSDP's root unit) stay gathered through
//    the step: the tied token embedding is read at both ends of the forward and the backward
//    pass. GatherOuter() refreshes them after each optimizer step.
//
// Parameter memory per rank: the shard (1/dp of the model shard) + the outer regions + two
// windows, instead of the whole model shard; bytes() counts it. The compact shard is the
// optimizer's parameters (on fp32 devices also its master weights).
//
// One training thread calls everything; gathers run on the given CommQueue (the data-parallel
// communicator's only issuer while it has work queued). The gathers' local copies are issued on
// the calling thread, so the device is used by one thread only.
#ifndef RINGMASTER_TRAINER_PARALLEL_ZERO3_PARAMETERS_H_
#define RINGMASTER_TRAINER_PARALLEL_ZERO3_PARAMETERS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/comm/communicator.h"
#include "trainer/model/gpt.h"
#include "trainer/parallel/comm_queue.h"
#include "trainer/parallel/zero_regions.h"

namespace ringmaster::trainer {

class Zero3Parameters final : public ParameterSource {
 public:
  // `dp` and `queue` must outlive this; `queue` may be null when dp has one rank.
  // INVALID_ARGUMENT when the shard holds no layer.
  static absl::StatusOr<std::unique_ptr<Zero3Parameters>> Create(Device* device, Communicator* dp,
                                                                 CommQueue* queue,
                                                                 const ParameterLayout& layout);

  const ZeroRegions& regions() const { return regions_; }
  // This rank's parameters, compact in owned-range order (shard_size() elements).
  Tensor shard() const { return shard_.tensor(); }
  // Gathers the outer regions from the shards (after an optimizer step, a load or an init).
  // Called with no gather or reduction in flight. Errors are the communicator's.
  absl::Status GatherOuter();
  // The full copy of flat range [offset, offset + size) of an outer region (read and write).
  Tensor Outer(int64_t offset, int64_t size) const;
  // Copies the owned parts of the outer regions from their full copies into the shard (after
  // the full copy was overwritten, e.g. the tied embedding from the first pipeline stage).
  void ShardFromOuter();
  // Bytes of parameter memory this rank holds.
  int64_t bytes() const;
  // Layer gathers issued so far (tests: each layer is gathered before its forward and again
  // before its backward).
  int64_t layer_gathers() const { return layer_gathers_; }

  // ParameterSource.
  absl::Status AcquireLayer(Pass pass, int layer) override;
  absl::Status ReleaseLayer(int layer) override;
  Tensor Parameters(int64_t offset, int64_t size) override;
  absl::Status WriteInitialParameters(int64_t offset, const float* values, int64_t size) override;

 private:
  struct Window {
    Tensor buffer;
    int layer = -1;      // the layer it holds or is gathering; -1: free
    bool held = false;   // acquired and not released
    int64_t ticket = 0;  // pending gather, 0 when none
  };
  Zero3Parameters(Device* device, Communicator* dp, CommQueue* queue, const ParameterLayout& layout)
      : device_(device),
        dp_(dp),
        queue_(queue),
        regions_(layout, dp->rank(), dp->size()),
        layers_(static_cast<int>(layout.layers().size())) {}
  Window* Find(int layer);
  // Starts gathering `layer` into `w` (waiting first for the gather it may still be receiving).
  absl::Status StartGather(Window* w, int layer);
  absl::Status Wait(Window* w);
  // Gathers `layer` into a free window if there is one; otherwise remembers it for the next
  // release.
  absl::Status Prefetch(int layer);

  Device* const device_;
  Communicator* const dp_;
  CommQueue* const queue_;
  const ZeroRegions regions_;
  const int layers_;
  DeviceBuffer shard_, outer_, windows_buffer_;
  std::vector<Tensor> outer_views_;  // by region; empty for layers
  Window windows_[2];
  int pending_ = -1;  // the layer to prefetch when a window frees
  int64_t layer_gathers_ = 0;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_PARALLEL_ZERO3_PARAMETERS_H_
