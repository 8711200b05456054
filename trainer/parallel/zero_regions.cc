#include "trainer/parallel/zero_regions.h"

#include <algorithm>

#include "trainer/parallel/buckets.h"

namespace ringmaster::trainer {

ZeroRegions::ZeroRegions(const ParameterLayout& layout, int dp_rank, int dp_size)
    : dp_rank_(dp_rank), dp_size_(dp_size) {
  auto add = [&](int64_t begin, int64_t end, int layer) {
    ZeroRegion r;
    r.begin = begin;
    r.size = end - begin;
    r.padded = PaddedSize(r.size, dp_size);
    r.chunk = r.padded / dp_size;
    r.owned = std::clamp<int64_t>(r.size - dp_rank * r.chunk, 0, r.chunk);
    r.state = shard_size_;
    r.layer = layer;
    shard_size_ += r.owned;
    regions_.push_back(r);
  };
  const std::vector<LayerOffsets>& layers = layout.layers();
  if (layers.front().begin > 0) add(0, layers.front().begin, -1);
  first_layer_region_ = static_cast<int>(regions_.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    add(layers[i].begin, layers[i].end, static_cast<int>(i));
    widest_layer_ = std::max(widest_layer_, regions_.back().padded);
  }
  if (layers.back().end < layout.size()) add(layers.back().end, layout.size(), -1);
}

std::vector<FlatRange> ZeroRegions::owned() const {
  std::vector<FlatRange> out;
  for (const ZeroRegion& r : regions_) {
    if (r.owned > 0) out.push_back({r.begin + dp_rank_ * r.chunk, r.owned});
  }
  return out;
}

int ZeroRegions::RegionOf(int64_t offset) const {
  auto it = std::upper_bound(regions_.begin(), regions_.end(), offset,
                             [](int64_t o, const ZeroRegion& r) { return o < r.begin; });
  return static_cast<int>(it - regions_.begin()) - 1;
}

}  // namespace ringmaster::trainer
