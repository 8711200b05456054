#include "trainer/parallel/zero2_gradients.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster::trainer {

absl::StatusOr<std::unique_ptr<Zero2Gradients>> Zero2Gradients::Create(
    Device* device, Communicator* dp, CommQueue* queue, const ParameterLayout& layout) {
  if (layout.layers().empty()) {
    return absl::InvalidArgumentError("ZeRO-2/3 need at least one layer on every rank");
  }
  std::unique_ptr<Zero2Gradients> z(new Zero2Gradients(device, dp, queue, layout));
  const std::vector<ZeroRegion>& regions = z->regions_.regions();
  int64_t outer = 0, outer_chunks = 0;
  for (const ZeroRegion& r : regions) {
    if (r.outer()) {
      outer += r.padded;
      outer_chunks += r.chunk;
    }
  }
  const int64_t widest = z->regions_.widest_layer();
  const int64_t widest_chunk = z->regions_.widest_layer_chunk();
  const DType dt = device->compute_dtype();
  ASSIGN_OR_RETURN(z->outer_, device->Allocate(std::max<int64_t>(outer, 1), dt));
  ASSIGN_OR_RETURN(z->workspaces_, device->Allocate(2 * widest, dt));
  ASSIGN_OR_RETURN(z->chunks_, device->Allocate(2 * widest_chunk + outer_chunks, dt));
  z->buffers_.resize(regions.size());
  int64_t outer_at = 0, outer_chunk_at = 2 * widest_chunk;
  for (size_t i = 0; i < regions.size(); ++i) {
    const ZeroRegion& r = regions[i];
    Buffers& b = z->buffers_[i];
    if (r.outer()) {
      b.buffer = z->outer_.Slice(outer_at, r.padded);
      b.chunk = z->chunks_.Slice(outer_chunk_at, r.chunk);
      outer_at += r.padded;
      outer_chunk_at += r.chunk;
    } else {
      const int64_t w = r.layer % 2;  // layer i uses workspace i % 2
      b.buffer = z->workspaces_.Slice(w * widest, r.padded);
      b.chunk = z->chunks_.Slice(w * widest_chunk, r.chunk);
    }
  }
  z->owned_ = z->regions_.owned();
  ASSIGN_OR_RETURN(z->shard_, device->Allocate(std::max<int64_t>(z->regions_.shard_size(), 1), dt));
  return z;
}

void Zero2Gradients::BeginStep() {
  device_->Zero(shard_.tensor());
  device_->Zero(outer_.tensor());
}

absl::Status Zero2Gradients::BeginLayer(int layer) {
  const int region = regions_.RegionOfLayer(layer);
  // The workspace's previous layer (two layers later in this pass, or a layer of the previous
  // microbatch) must be reduced before its memory is reused.
  int& previous = workspace_user_[layer % 2];
  if (previous >= 0) RETURN_IF_ERROR(Fold(previous));
  previous = region;
  device_->Zero(buffers_[region].buffer);
  return absl::OkStatus();
}

Tensor Zero2Gradients::Gradients(int64_t offset, int64_t size) {
  const int i = regions_.RegionOf(offset);
  return buffers_[i].buffer.Slice(offset - regions_.regions()[i].begin, size);
}

void Zero2Gradients::Reduce(int region) {
  Buffers& b = buffers_[region];
  if (dp_->size() == 1) {
    device_->Convert(b.chunk, b.buffer.Slice(0, b.chunk.size));
    b.ticket = -1;  // folded without waiting
    return;
  }
  Tensor whole = b.buffer;
  Tensor out = b.chunk;
  Communicator* dp = dp_;
  // Ordered after the region's gradient kernels issued so far.
  b.ticket = queue_->EnqueueCollective(device_, dp,
                                       [dp, whole, out] { return dp->ReduceScatter(whole, out); });
}

void Zero2Gradients::OnGradientsFinal(int64_t low) {
  // Regions finish from the last (final norm, or the stage's last layer) to the first.
  const std::vector<ZeroRegion>& regions = regions_.regions();
  const int count = static_cast<int>(regions.size());
  while (next_final_ < count && regions[count - 1 - next_final_].begin >= low) {
    const int i = count - 1 - next_final_++;
    if (!regions[i].outer() || last_microbatch_) Reduce(i);
  }
}

absl::Status Zero2Gradients::Fold(int region) {
  Buffers& b = buffers_[region];
  if (b.ticket == 0) return absl::OkStatus();
  if (b.ticket > 0) RETURN_IF_ERROR(queue_->WaitFor(b.ticket));
  b.ticket = 0;
  const ZeroRegion& r = regions_.regions()[region];
  if (r.owned > 0) {
    Tensor into = shard_.Slice(r.state, r.owned);
    device_->Add(into, into, b.chunk.Slice(0, r.owned), r.owned);
  }
  return absl::OkStatus();
}

absl::Status Zero2Gradients::Finish() {
  for (size_t i = 0; i < buffers_.size(); ++i) RETURN_IF_ERROR(Fold(static_cast<int>(i)));
  workspace_user_[0] = workspace_user_[1] = -1;
  return device_->Synchronize();
}

absl::Status Zero2Gradients::GatherParameters(Tensor params) {
  const int rank = dp_->rank();
  const std::vector<ZeroRegion>& regions = regions_.regions();
  for (size_t i = 0; i < regions.size(); ++i) {
    const ZeroRegion& r = regions[i];
    // The region's gradient buffer is free between steps: it stages the gather.
    Tensor staging = buffers_[i].buffer;
    Tensor own = staging.Slice(rank * r.chunk, r.chunk);
    device_->Zero(own);
    if (r.owned > 0) {
      device_->Convert(own.Slice(0, r.owned), params.Slice(r.begin + rank * r.chunk, r.owned));
    }
    if (dp_->size() > 1) RETURN_IF_ERROR(dp_->AllGather(own, staging));
    device_->Convert(params.Slice(r.begin, r.size), staging.Slice(0, r.size));
  }
  return device_->Synchronize();
}

int64_t Zero2Gradients::bytes() const {
  return static_cast<int64_t>(outer_.tensor().bytes() + workspaces_.tensor().bytes() +
                              chunks_.tensor().bytes() + shard_.tensor().bytes());
}

}  // namespace ringmaster::trainer
