#include "trainer/parallel/zero2_gradients.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "trainer/parallel/buckets.h"

namespace ringmaster::trainer {

absl::StatusOr<std::unique_ptr<Zero2Gradients>> Zero2Gradients::Create(
    Device* device, Communicator* dp, CommQueue* queue, const ParameterLayout& layout) {
  if (layout.layers().empty() || layout.wte() != 0 || layout.lnfw() < 0) {
    return absl::UnimplementedError("ZeRO-2 needs the whole model on this rank");
  }
  std::unique_ptr<Zero2Gradients> z(new Zero2Gradients(device, dp, queue));
  const int n = dp->size();
  const int r = dp->rank();
  auto add = [&](int64_t begin, int64_t end) {
    Region region;
    region.begin = begin;
    region.size = end - begin;
    region.padded = PaddedSize(region.size, n);
    const int64_t c = region.padded / n;
    region.owned = std::clamp<int64_t>(region.size - r * c, 0, c);
    z->regions_.push_back(region);
  };
  add(0, layout.layers().front().begin);
  for (const LayerOffsets& l : layout.layers()) add(l.begin, l.end);
  add(layout.lnfw(), layout.size());

  Region& low = z->regions_.front();
  Region& high = z->regions_.back();
  int64_t widest = 0, widest_chunk = 0;
  for (size_t i = 1; i + 1 < z->regions_.size(); ++i) {
    widest = std::max(widest, z->regions_[i].padded);
    widest_chunk = std::max(widest_chunk, z->chunk(z->regions_[i]));
  }
  const DType dt = device->compute_dtype();
  ASSIGN_OR_RETURN(z->outer_, device->Allocate(low.padded + high.padded, dt));
  ASSIGN_OR_RETURN(z->workspaces_, device->Allocate(2 * widest, dt));
  ASSIGN_OR_RETURN(z->chunks_, device->Allocate(2 * widest_chunk + z->chunk(low) +
                                                    z->chunk(high), dt));
  low.buffer = z->outer_.Slice(0, low.padded);
  high.buffer = z->outer_.Slice(low.padded, high.padded);
  low.chunk = z->chunks_.Slice(2 * widest_chunk, z->chunk(low));
  high.chunk = z->chunks_.Slice(2 * widest_chunk + z->chunk(low), z->chunk(high));
  int64_t state = 0;
  for (size_t i = 0; i < z->regions_.size(); ++i) {
    Region& g = z->regions_[i];
    if (i > 0 && i + 1 < z->regions_.size()) {
      const int64_t w = (i - 1) % 2;  // layer index i - 1 uses workspace (i - 1) % 2
      g.buffer = z->workspaces_.Slice(w * widest, g.padded);
      g.chunk = z->chunks_.Slice(w * widest_chunk, z->chunk(g));
    }
    g.state = state;
    if (g.owned > 0) z->owned_.push_back({g.begin + r * z->chunk(g), g.owned});
    state += g.owned;
  }
  ASSIGN_OR_RETURN(z->shard_, device->Allocate(std::max<int64_t>(state, 1), dt));
  return z;
}

void Zero2Gradients::BeginStep() {
  device_->Zero(shard_.tensor());
  device_->Zero(outer_.tensor());
}

absl::Status Zero2Gradients::BeginLayer(int layer) {
  Region& region = regions_[layer + 1];
  // The workspace's previous layer (two layers later in this pass, or a layer of the previous
  // microbatch) must be reduced before its memory is reused.
  int& previous = workspace_user_[layer % 2];
  if (previous >= 0) RETURN_IF_ERROR(Fold(&regions_[previous]));
  previous = layer + 1;
  device_->Zero(region.buffer);
  return absl::OkStatus();
}

Tensor Zero2Gradients::Gradients(int64_t offset, int64_t size) {
  // The region whose range holds `offset`: the last one beginning at or before it.
  auto it = std::upper_bound(regions_.begin(), regions_.end(), offset,
                             [](int64_t o, const Region& r) { return o < r.begin; });
  const Region& region = *(it - 1);
  return region.buffer.Slice(offset - region.begin, size);
}

void Zero2Gradients::Reduce(Region* region) {
  if (dp_->size() == 1) {
    device_->Convert(region->chunk, region->buffer.Slice(0, chunk(*region)));
    region->ticket = -1;  // folded without waiting
    return;
  }
  Tensor whole = region->buffer;
  Tensor out = region->chunk;
  Communicator* dp = dp_;
  region->ticket = queue_->Enqueue([dp, whole, out] { return dp->ReduceScatter(whole, out); });
}

void Zero2Gradients::OnGradientsFinal(int64_t low) {
  // Regions finish from the last (final norm) to the first (embeddings).
  const int count = static_cast<int>(regions_.size());
  while (next_final_ < count && regions_[count - 1 - next_final_].begin >= low) {
    const int i = count - 1 - next_final_++;
    const bool outer = i == 0 || i == count - 1;
    if (!outer || last_microbatch_) Reduce(&regions_[i]);
  }
}

absl::Status Zero2Gradients::Fold(Region* region) {
  if (region->ticket == 0) return absl::OkStatus();
  if (region->ticket > 0) RETURN_IF_ERROR(queue_->WaitFor(region->ticket));
  region->ticket = 0;
  if (region->owned > 0) {
    Tensor into = shard_.Slice(region->state, region->owned);
    device_->Add(into, into, region->chunk.Slice(0, region->owned), region->owned);
  }
  return absl::OkStatus();
}

absl::Status Zero2Gradients::Finish() {
  for (Region& region : regions_) RETURN_IF_ERROR(Fold(&region));
  workspace_user_[0] = workspace_user_[1] = -1;
  return device_->Synchronize();
}

absl::Status Zero2Gradients::GatherParameters(Tensor params) {
  const int r = dp_->rank();
  for (Region& region : regions_) {
    const int64_t c = chunk(region);
    // The region's gradient buffer is free between steps: it stages the gather.
    Tensor staging = region.buffer;
    Tensor own = staging.Slice(r * c, c);
    device_->Zero(own);
    if (region.owned > 0) {
      device_->Convert(own.Slice(0, region.owned),
                       params.Slice(region.begin + r * c, region.owned));
    }
    if (dp_->size() > 1) RETURN_IF_ERROR(dp_->AllGather(own, staging));
    device_->Convert(params.Slice(region.begin, region.size), staging.Slice(0, region.size));
  }
  return device_->Synchronize();
}

int64_t Zero2Gradients::bytes() const {
  return outer_.tensor().bytes() + workspaces_.tensor().bytes() + chunks_.tensor().bytes() +
         shard_.tensor().bytes();
}

}  // namespace ringmaster::trainer
