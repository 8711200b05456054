// Which layers each pipeline stage holds: contiguous ranges chosen so that the stages' compute is
// as even as possible once the embedding lookup (first stage) and the LM head with its
// cross-entropy (last stage) are counted.
//
// Cost model: training FLOPs per token (forward + backward), llm.c's accounting —
//   layer: 6 * (12 C^2 + 13 C) for its weights plus 6 C T for attention;
//   head:  6 C Vp (the tied LM head's matmul, forward and backward);
//   embedding: 3 C (a lookup and two scatter-adds; no matmul).
// For GPT-2 small (C 768, T 1024, Vp 50304) the head costs 4.9 layers, so the last of 4 stages
// gets 1 layer and the others 3, 4, 4 (the first stage's lookup tips the tie); for the tiny test
// models the head costs a fraction of a layer and the split is even.
//
// The partition minimises the most expensive stage; among partitions with that maximum it takes
// the one with the smallest sum of squared stage costs (the other stages as even as possible), and
// then the one that puts more layers on earlier stages. Every stage holds at least one layer.
// Pure functions; deterministic.
#ifndef RINGMASTER_TRAINER_MODEL_PIPELINE_PARTITION_H_
#define RINGMASTER_TRAINER_MODEL_PIPELINE_PARTITION_H_

#include <vector>

#include "absl/status/statusor.h"
#include "trainer/model/gpt_config.h"

namespace ringmaster::trainer {

// Training FLOPs per token of each part of the model.
struct StageCosts {
  double embedding = 0;
  double layer = 0;
  double head = 0;
};
StageCosts EstimateStageCosts(const GptConfig& config);

struct LayerRange {
  int first = 0;
  int count = 0;
  bool operator==(const LayerRange& o) const { return first == o.first && count == o.count; }
};

// The balanced split of `layers` layers into `stages` stages under `costs`.
// INVALID_ARGUMENT naming parallelism.pipeline when stages < 1 or stages > layers.
absl::StatusOr<std::vector<LayerRange>> PartitionLayers(int layers, int stages,
                                                        const StageCosts& costs);

// The cost of each stage of `partition` (FLOPs per token).
std::vector<double> StageCostsOf(const std::vector<LayerRange>& partition, const StageCosts& costs);

// The part of the model that tensor rank `tp_rank` of `tp` in pipeline stage `pp_rank` of `pp`
// holds. INVALID_ARGUMENT naming parallelism.tensor or parallelism.pipeline for a layout the
// model cannot be split into (tp must divide model.heads; pp at most model.layers).
absl::StatusOr<ModelShard> MakeModelShard(const GptConfig& config, int tp_rank, int tp, int pp_rank,
                                          int pp);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_MODEL_PIPELINE_PARTITION_H_
