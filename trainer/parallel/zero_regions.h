// How ZeRO-2 and ZeRO-3 cut a model shard's flat buffer for sharding over the data-parallel
// group: into regions, each split into one equal chunk per data-parallel rank.
//
// Regions, in flat order: the range before the shard's first layer (the embeddings: wte and wpe
// on the first pipeline stage, the tied wte alone on a last stage), each layer, and the range
// after the last layer (the final LayerNorm); the outer ranges only where the shard has them, so
// every pipeline stage and tensor-parallel slice is covered. A region is padded to a multiple of
// dp_size * 16 elements (the padding is never a parameter) and rank r owns chunk r of it; the
// chunk's real elements are `owned`. The compact shard of a rank (owned gradients, owned
// parameters, optimizer state) is its regions' owned parts one after another.
//
// Immutable after construction; thread-compatible.
#ifndef RINGMASTER_TRAINER_PARALLEL_ZERO_REGIONS_H_
#define RINGMASTER_TRAINER_PARALLEL_ZERO_REGIONS_H_

#include <cstdint>
#include <vector>

#include "trainer/model/parameter_layout.h"
#include "trainer/optim/adamw_optimizer.h"

namespace ringmaster::trainer {

struct ZeroRegion {
  int64_t begin = 0, size = 0;  // flat range
  int64_t padded = 0;           // multiple of dp_size * 16
  int64_t chunk = 0;            // padded / dp_size
  int64_t owned = 0;            // real elements of this rank's chunk
  int64_t state = 0;            // offset of the owned part in the compact shard
  int layer = -1;               // index into layout.layers(); -1 for an outer region
  bool outer() const { return layer < 0; }
};

class ZeroRegions {
 public:
  // `layout` must hold at least one layer.
  ZeroRegions(const ParameterLayout& layout, int dp_rank, int dp_size);

  int dp_rank() const { return dp_rank_; }
  int dp_size() const { return dp_size_; }
  const std::vector<ZeroRegion>& regions() const { return regions_; }
  // Elements of the compact shard.
  int64_t shard_size() const { return shard_size_; }
  // The flat ranges this rank owns, ascending (the optimizer's owned ranges).
  std::vector<FlatRange> owned() const;
  // Index of the region holding flat `offset` (< the layout's size).
  int RegionOf(int64_t offset) const;
  // Index of layer `layer`'s region.
  int RegionOfLayer(int layer) const { return first_layer_region_ + layer; }
  // The largest padded layer region and its chunk (workspace sizes).
  int64_t widest_layer() const { return widest_layer_; }
  int64_t widest_layer_chunk() const { return widest_layer_ / dp_size_; }

 private:
  int dp_rank_, dp_size_;
  std::vector<ZeroRegion> regions_;
  int first_layer_region_ = 0;
  int64_t shard_size_ = 0;
  int64_t widest_layer_ = 0;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_PARALLEL_ZERO_REGIONS_H_
