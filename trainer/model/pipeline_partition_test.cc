#include "trainer/model/pipeline_partition.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

using ::testing::HasSubstr;

struct Case {
  const char* name;
  int layers, d_model, heads, seq_len, vocab;
  int stages;
  std::vector<int> counts;  // layers per stage
};

class PartitionTest : public ::testing::TestWithParam<Case> {};

TEST_P(PartitionTest, BalancesLayersAgainstTheEmbeddingAndHead) {
  const Case& c = GetParam();
  GptConfig config = *GptConfig::Create(c.layers, c.d_model, c.heads, c.seq_len, c.vocab);
  const StageCosts costs = EstimateStageCosts(config);
  auto ranges = PartitionLayers(c.layers, c.stages, costs);
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  std::vector<int> counts;
  int next = 0;
  for (const LayerRange& r : *ranges) {
    EXPECT_EQ(r.first, next) << c.name << ": stages are contiguous";
    next += r.count;
    counts.push_back(r.count);
  }
  EXPECT_EQ(next, c.layers);
  EXPECT_EQ(counts, c.counts) << c.name;
  // No other split into contiguous non-empty stages has a cheaper most expensive stage.
  const std::vector<double> mine = StageCostsOf(*ranges, costs);
  const double worst = *std::max_element(mine.begin(), mine.end());
  std::vector<int> split(c.stages, 1);
  std::function<void(int, int)> all = [&](int stage, int left) {
    if (stage == c.stages - 1) {
      split[stage] = left;
      std::vector<LayerRange> other;
      int first = 0;
      for (int k : split) {
        other.push_back({first, k});
        first += k;
      }
      const std::vector<double> theirs = StageCostsOf(other, costs);
      EXPECT_GE(*std::max_element(theirs.begin(), theirs.end()), worst * (1 - 1e-12));
      return;
    }
    for (int k = 1; k <= left - (c.stages - 1 - stage); ++k) {
      split[stage] = k;
      all(stage + 1, left - k);
    }
  };
  all(0, c.layers);
}

INSTANTIATE_TEST_SUITE_P(
    Models, PartitionTest,
    ::testing::Values(
        // The test models: the head is a fraction of a layer, so the split is even.
        Case{"tiny_2x2", 2, 64, 4, 32, 128, 2, {1, 1}},
        Case{"tiny_4x2", 4, 32, 4, 16, 100, 2, {2, 2}},
        Case{"tiny_8x4", 8, 64, 4, 32, 128, 4, {2, 2, 2, 2}},
        Case{"one_stage", 5, 64, 4, 32, 128, 1, {5}},
        Case{"stage_per_layer", 3, 64, 4, 32, 128, 3, {1, 1, 1}},
        // Uneven: the head goes with the last stage, so the extra layer goes first.
        Case{"tiny_3x2", 3, 64, 4, 32, 128, 2, {2, 1}},
        // GPT-2 small: the LM head (50304 x 768) costs 4.9 layers.
        Case{"gpt2_small_pp2", 12, 768, 12, 1024, 50257, 2, {8, 4}},
        // The other three stages split 11 layers as evenly as they can; the embedding lookup's
        // small cost makes the first stage the one with fewer.
        Case{"gpt2_small_pp4", 12, 768, 12, 1024, 50257, 4, {3, 4, 4, 1}},
        // A large vocabulary on a narrow model: the head outweighs several layers.
        Case{"big_vocab_pp3", 12, 128, 4, 64, 32000, 3, {5, 6, 1}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(PartitionErrorsTest, MoreStagesThanLayersNamesTheField) {
  auto r = PartitionLayers(3, 4, StageCosts{0, 1, 0});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
  EXPECT_THAT(r.status().message(),
              HasSubstr("parallelism.pipeline: must be in [1, model.layers = 3] so every stage "
                        "holds a layer, got 4"));
}

TEST(MakeModelShardTest, StagesHoldTheirRangeAndTheEndsTheEmbeddingsAndHead) {
  GptConfig config = *GptConfig::Create(4, 32, 4, 16, 100);
  auto first = MakeModelShard(config, 1, 2, 0, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->tp_rank, 1);
  EXPECT_EQ(first->tp_size, 2);
  EXPECT_EQ(first->first_layer, 0);
  EXPECT_EQ(first->num_layers, 2);
  EXPECT_TRUE(first->has_embedding);
  EXPECT_FALSE(first->has_head);
  auto last = MakeModelShard(config, 0, 2, 1, 2);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->first_layer, 2);
  EXPECT_FALSE(last->has_embedding);
  EXPECT_TRUE(last->has_head);
  auto bad_tp = MakeModelShard(config, 0, 3, 0, 1);
  EXPECT_THAT(bad_tp.status().message(), HasSubstr("parallelism.tensor: must divide model.heads"));
  auto bad_pp = MakeModelShard(config, 0, 1, 0, 5);
  EXPECT_THAT(bad_pp.status().message(), HasSubstr("parallelism.pipeline"));
}

}  // namespace
}  // namespace ringmaster::trainer
