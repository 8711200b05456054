#include "trainer/parallel/zero3_parameters.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

namespace ringmaster::trainer {

absl::StatusOr<std::unique_ptr<Zero3Parameters>> Zero3Parameters::Create(
    Device* device, Communicator* dp, CommQueue* queue, const ParameterLayout& layout) {
  if (layout.layers().empty()) {
    return absl::InvalidArgumentError("ZeRO-3 needs at least one layer on every rank");
  }
  std::unique_ptr<Zero3Parameters> z(new Zero3Parameters(device, dp, queue, layout));
  const DType dt = device->compute_dtype();
  const std::vector<ZeroRegion>& regions = z->regions_.regions();
  int64_t outer = 0;
  for (const ZeroRegion& r : regions) {
    if (r.outer()) outer += r.padded;
  }
  ASSIGN_OR_RETURN(z->shard_, device->Allocate(std::max<int64_t>(z->regions_.shard_size(), 1), dt));
  ASSIGN_OR_RETURN(z->outer_, device->Allocate(std::max<int64_t>(outer, 1), dt));
  const int64_t widest = z->regions_.widest_layer();
  ASSIGN_OR_RETURN(z->windows_buffer_, device->Allocate(2 * widest, dt));
  z->windows_[0].buffer = z->windows_buffer_.Slice(0, widest);
  z->windows_[1].buffer = z->windows_buffer_.Slice(widest, widest);
  z->outer_views_.resize(regions.size());
  int64_t at = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    if (!regions[i].outer()) continue;
    z->outer_views_[i] = z->outer_.Slice(at, regions[i].padded);
    at += regions[i].padded;
  }
  return z;
}

absl::Status Zero3Parameters::GatherOuter() {
  const int rank = dp_->rank();
  const std::vector<ZeroRegion>& regions = regions_.regions();
  for (size_t i = 0; i < regions.size(); ++i) {
    const ZeroRegion& r = regions[i];
    if (!r.outer()) continue;
    Tensor full = outer_views_[i];
    Tensor own = full.Slice(rank * r.chunk, r.chunk);
    device_->Zero(own);
    if (r.owned > 0) device_->Convert(own.Slice(0, r.owned), shard_.Slice(r.state, r.owned));
    if (dp_->size() > 1) RETURN_IF_ERROR(dp_->AllGather(own, full));
  }
  return device_->Synchronize();
}

Tensor Zero3Parameters::Outer(int64_t offset, int64_t size) const {
  const int i = regions_.RegionOf(offset);
  RM_CHECK(regions_.regions()[i].outer()) << "offset " << offset << " is inside a layer";
  return outer_views_[i].Slice(offset - regions_.regions()[i].begin, size);
}

void Zero3Parameters::ShardFromOuter() {
  const int rank = dp_->rank();
  const std::vector<ZeroRegion>& regions = regions_.regions();
  for (size_t i = 0; i < regions.size(); ++i) {
    const ZeroRegion& r = regions[i];
    if (!r.outer() || r.owned == 0) continue;
    device_->Convert(shard_.Slice(r.state, r.owned),
                     outer_views_[i].Slice(rank * r.chunk, r.owned));
  }
}

int64_t Zero3Parameters::bytes() const {
  return static_cast<int64_t>(shard_.tensor().bytes() + outer_.tensor().bytes() +
                              windows_buffer_.tensor().bytes());
}

Zero3Parameters::Window* Zero3Parameters::Find(int layer) {
  for (Window& w : windows_) {
    if (w.layer == layer) return &w;
  }
  return nullptr;
}

absl::Status Zero3Parameters::Wait(Window* w) {
  if (w->ticket > 0) RETURN_IF_ERROR(queue_->WaitFor(w->ticket));
  w->ticket = 0;
  return absl::OkStatus();
}

absl::Status Zero3Parameters::StartGather(Window* w, int layer) {
  RETURN_IF_ERROR(Wait(w));  // the communication thread may still be writing into it
  const ZeroRegion& r = regions_.regions()[regions_.RegionOfLayer(layer)];
  w->layer = layer;
  w->held = false;
  ++layer_gathers_;
  Tensor full = w->buffer.Slice(0, r.padded);
  Tensor own = full.Slice(dp_->rank() * r.chunk, r.chunk);
  device_->Zero(own);
  if (r.owned > 0) device_->Convert(own.Slice(0, r.owned), shard_.Slice(r.state, r.owned));
  if (dp_->size() == 1) return absl::OkStatus();
  // The gather runs after the copy above and after the kernels that last read this window,
  // all issued by now (the CPU device has already run them), without waiting for the host or
  // for the work queued later.
  Communicator* dp = dp_;
  w->ticket =
      queue_->EnqueueCollective(device_, dp, [dp, own, full] { return dp->AllGather(own, full); });
  return absl::OkStatus();
}

absl::Status Zero3Parameters::Prefetch(int layer) {
  pending_ = -1;
  if (layer < 0 || layer >= layers_ || Find(layer) != nullptr) return absl::OkStatus();
  Window* free = Find(-1);
  if (free == nullptr) {
    pending_ = layer;
    return absl::OkStatus();
  }
  return StartGather(free, layer);
}

absl::Status Zero3Parameters::AcquireLayer(Pass pass, int layer) {
  Window* w = Find(layer);
  if (w == nullptr) {
    // Not prefetched: take a free window, or one holding a prefetched layer nobody holds.
    w = Find(-1);
    for (Window& other : windows_) {
      if (w == nullptr && !other.held) w = &other;
    }
    RM_CHECK(w != nullptr) << "more than two layers acquired at once";
    RETURN_IF_ERROR(StartGather(w, layer));
  }
  RETURN_IF_ERROR(Wait(w));
  w->held = true;
  return Prefetch(pass == Pass::kForward ? layer + 1 : layer - 1);
}

absl::Status Zero3Parameters::ReleaseLayer(int layer) {
  Window* w = Find(layer);
  RM_CHECK(w != nullptr && w->held) << "layer " << layer << " released but not held";
  w->held = false;
  w->layer = -1;  // freed: the next gather may overwrite it
  if (pending_ >= 0) return Prefetch(pending_);
  return absl::OkStatus();
}

Tensor Zero3Parameters::Parameters(int64_t offset, int64_t size) {
  const int i = regions_.RegionOf(offset);
  const ZeroRegion& r = regions_.regions()[i];
  if (r.outer()) return outer_views_[i].Slice(offset - r.begin, size);
  Window* w = Find(r.layer);
  RM_CHECK(w != nullptr && w->held) << "parameters of layer " << r.layer << " read but not held";
  return w->buffer.Slice(offset - r.begin, size);
}

absl::Status Zero3Parameters::WriteInitialParameters(int64_t offset, const float* values,
                                                     int64_t size) {
  const int rank = dp_->rank();
  for (const ZeroRegion& r : regions_.regions()) {
    const int64_t own_begin = r.begin + rank * r.chunk;
    const int64_t lo = std::max(offset, own_begin);
    const int64_t hi = std::min(offset + size, own_begin + r.owned);
    if (lo >= hi) continue;
    Tensor dst = shard_.Slice(r.state + (lo - own_begin), hi - lo);
    if (dst.dtype == DType::kF32) {
      RETURN_IF_ERROR(device_->CopyToDevice(dst, values + (lo - offset)));
    } else {
      ASSIGN_OR_RETURN(DeviceBuffer staging, device_->Allocate(hi - lo, DType::kF32));
      RETURN_IF_ERROR(device_->CopyToDevice(staging.tensor(), values + (lo - offset)));
      device_->Convert(dst, staging.tensor());
    }
  }
  return absl::OkStatus();
}

}  // namespace ringmaster::trainer
