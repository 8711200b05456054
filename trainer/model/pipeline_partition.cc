#include "trainer/model/pipeline_partition.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster::trainer {
namespace {

double StageCost(int stage, int stages, int layers, const StageCosts& c) {
  return layers * c.layer + (stage == 0 ? c.embedding : 0) + (stage == stages - 1 ? c.head : 0);
}

}  // namespace

StageCosts EstimateStageCosts(const GptConfig& config) {
  const double C = config.d_model;
  StageCosts c;
  c.embedding = 3 * C;
  c.layer = 6 * (12 * C * C + 13 * C) + 6 * C * config.seq_len;
  c.head = 6 * C * config.padded_vocab;
  return c;
}

absl::StatusOr<std::vector<LayerRange>> PartitionLayers(int layers, int stages,
                                                        const StageCosts& raw) {
  if (stages < 1 || stages > layers) {
    return FieldError("parallelism.pipeline",
                      absl::StrCat("must be in [1, model.layers = ", layers,
                                   "] so every stage holds a layer, got ", stages));
  }
  // In units of one layer, so that sums of squares stay exact for equal layer counts and ties
  // are recognised as ties.
  StageCosts costs = raw;
  if (raw.layer > 0) costs = {raw.embedding / raw.layer, 1.0, raw.head / raw.layer};
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[s][l]: the smallest possible maximum stage cost when stages 0..s hold layers [0, l).
  std::vector<std::vector<double>> best(stages, std::vector<double>(layers + 1, kInf));
  for (int l = 1; l <= layers - (stages - 1); ++l) best[0][l] = StageCost(0, stages, l, costs);
  for (int s = 1; s < stages; ++s) {
    for (int l = s + 1; l <= layers - (stages - 1 - s); ++l) {
      for (int k = 1; k <= l - s; ++k) {
        const double c = std::max(best[s - 1][l - k], StageCost(s, stages, k, costs));
        best[s][l] = std::min(best[s][l], c);
      }
    }
  }
  const double limit = best[stages - 1][layers];
  // Among partitions whose every stage costs at most `limit`: the smallest sum of squares.
  // squares[s][l] as best[][] but for that sum; choice[s][l] the layers stage s takes.
  std::vector<std::vector<double>> squares(stages, std::vector<double>(layers + 1, kInf));
  std::vector<std::vector<int>> choice(stages, std::vector<int>(layers + 1, 0));
  for (int l = 1; l <= layers - (stages - 1); ++l) {
    const double c = StageCost(0, stages, l, costs);
    if (c <= limit) {
      squares[0][l] = c * c;
      choice[0][l] = l;
    }
  }
  for (int s = 1; s < stages; ++s) {
    for (int l = s + 1; l <= layers - (stages - 1 - s); ++l) {
      // Fewest layers on this stage first, so that on a tie the earlier stages keep more.
      for (int k = 1; k <= l - s; ++k) {
        const double c = StageCost(s, stages, k, costs);
        if (c > limit || squares[s - 1][l - k] == kInf) continue;
        const double total = squares[s - 1][l - k] + c * c;
        if (total < squares[s][l]) {
          squares[s][l] = total;
          choice[s][l] = k;
        }
      }
    }
  }
  std::vector<LayerRange> ranges(stages);
  int end = layers;
  for (int s = stages - 1; s >= 0; --s) {
    const int k = choice[s][end];
    ranges[s] = LayerRange{end - k, k};
    end -= k;
  }
  return ranges;
}

std::vector<double> StageCostsOf(const std::vector<LayerRange>& partition,
                                 const StageCosts& costs) {
  std::vector<double> out;
  const int stages = static_cast<int>(partition.size());
  for (int s = 0; s < stages; ++s) out.push_back(StageCost(s, stages, partition[s].count, costs));
  return out;
}

absl::StatusOr<ModelShard> MakeModelShard(const GptConfig& config, int tp_rank, int tp, int pp_rank,
                                          int pp) {
  ASSIGN_OR_RETURN(std::vector<LayerRange> ranges,
                   PartitionLayers(config.layers, pp, EstimateStageCosts(config)));
  if (pp_rank < 0 || pp_rank >= pp) {
    return FieldError("parallelism.pipeline",
                      absl::StrCat("stage ", pp_rank, " of ", pp, " is not a valid position"));
  }
  ModelShard shard;
  shard.tp_rank = tp_rank;
  shard.tp_size = tp;
  shard.first_layer = ranges[pp_rank].first;
  shard.num_layers = ranges[pp_rank].count;
  shard.has_embedding = pp_rank == 0;
  shard.has_head = pp_rank == pp - 1;
  RETURN_IF_ERROR(shard.Validate(config));
  return shard;
}

}  // namespace ringmaster::trainer
