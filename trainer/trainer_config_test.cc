#include "trainer/trainer_config.h"

#include <map>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Spec() {
  v1::JobSpec s;
  s.set_name("t");
  s.set_nodes(1);
  s.set_devices_per_node(2);
  s.mutable_parallelism()->set_tensor(1);
  s.mutable_parallelism()->set_pipeline(1);
  s.mutable_parallelism()->set_data(2);
  v1::TrainerSpec* t = s.mutable_trainer();
  t->set_builtin("gpt");
  t->mutable_model()->set_layers(2);
  t->mutable_model()->set_d_model(32);
  t->mutable_model()->set_heads(4);
  t->mutable_model()->set_seq_len(16);
  t->mutable_model()->set_vocab(200);
  t->mutable_batch()->set_micro_batch(2);
  t->mutable_batch()->set_global_batch(8);
  t->set_steps(10);
  t->mutable_optimizer()->set_lr(1e-3);
  return s;
}

// An environment as the agent sets it for rank 1 of a DP=2 job.
std::map<std::string, std::string> AgentEnv(const v1::JobSpec& spec) {
  std::string json;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(spec, &json).ok());
  return {{"RINGMASTER_AGENT_SOCKET", "/tmp/x.sock"},
          {"RINGMASTER_JOB_SPEC_JSON", json},
          {"RANK", "1"},
          {"WORLD_SIZE", "2"},
          {"RINGMASTER_DP_RANK", "1"},
          {"RINGMASTER_DP_SIZE", "2"},
          {"RINGMASTER_CHECKPOINT_DIR", "/ckpt"},
          {"RINGMASTER_JOB", "gpt-1"},
          {"RINGMASTER_HOST_ADDRESS", "10.0.0.7"},
          {"RINGMASTER_NODE", "node-b"}};
}

EnvLookup Lookup(const std::map<std::string, std::string>& env) {
  return [env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

TEST(TrainerConfigTest, ReadsTheAgentsEnvironment) {
  v1::JobSpec spec = Spec();
  spec.mutable_checkpoint()->set_max_consecutive_failures(4);
  auto c = LoadTrainerConfig(Lookup(AgentEnv(spec)), {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->place.rank, 1);
  EXPECT_EQ(c->place.dp, 2);
  EXPECT_EQ(c->micro_steps, 2);  // 8 / (2 * 2)
  EXPECT_EQ(c->model.padded_vocab, 256);
  EXPECT_EQ(c->checkpoint.dir, "/ckpt");
  EXPECT_EQ(c->checkpoint.max_consecutive_failures, 4);  // the spec's failure policy
  EXPECT_EQ(c->host_address, "10.0.0.7");
  EXPECT_EQ(c->node, "node-b");  // only ranks of one node share memory
  EXPECT_EQ(c->data_seed, 1234u);  // the coordinator's default
  EXPECT_DOUBLE_EQ(c->schedule.min_lr, 1e-4);

  // Zeros that are set reach the trainer through the spec's JSON as zeros, not as defaults.
  v1::JobSpec zeros = Spec();
  zeros.mutable_trainer()->mutable_optimizer()->set_min_lr(0);
  zeros.mutable_trainer()->mutable_data()->set_seed(0);
  c = LoadTrainerConfig(Lookup(AgentEnv(zeros)), {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data_seed, 0u);
  EXPECT_EQ(c->schedule.min_lr, 0);
}

TEST(TrainerConfigTest, AnElasticJobKeepingItsPerReplicaBatchScalesTheLearningRate) {
  // The job asks for DP 4 (global batch 8, micro 2: one micro-batch per replica); this
  // generation runs at DP 2.
  v1::JobSpec spec = Spec();
  spec.set_nodes(2);
  spec.set_min_nodes(1);
  spec.mutable_parallelism()->set_data(4);
  std::map<std::string, std::string> env = AgentEnv(spec);
  env["RINGMASTER_DESIRED_DP_SIZE"] = "4";
  auto global = LoadTrainerConfig(Lookup(env), {});
  ASSERT_TRUE(global.ok()) << global.status();
  EXPECT_EQ(global->micro_steps, 2);  // the global batch kept: 8 / (2 * 2)
  EXPECT_EQ(global->lr_scale, 1.0);
  spec.set_elastic_batch(v1::ELASTIC_BATCH_PER_REPLICA);
  spec.set_elastic_warmup_steps(3);
  env = AgentEnv(spec);
  env["RINGMASTER_DESIRED_DP_SIZE"] = "4";
  auto per_replica = LoadTrainerConfig(Lookup(env), {});
  ASSERT_TRUE(per_replica.ok()) << per_replica.status();
  EXPECT_EQ(per_replica->micro_steps, 1);  // the full size's: global batch 4 at DP 2
  EXPECT_EQ(per_replica->lr_scale, 0.5);
  EXPECT_EQ(per_replica->lr_scale_warmup, 3);
  spec.set_elastic_wait_seconds(-1);
  env = AgentEnv(spec);
  EXPECT_THAT(LoadTrainerConfig(Lookup(env), {}).status().message(),
              HasSubstr("elastic_wait_seconds: must be"));
}

TEST(TrainerConfigTest, BadInputIsAFieldError) {
  auto env = AgentEnv(Spec());
  env["RANK"] = "x";
  EXPECT_THAT(LoadTrainerConfig(Lookup(env), {}).status().message(),
              HasSubstr("RANK: must be an integer"));
  env = AgentEnv(Spec());
  env["RINGMASTER_DP_RANK"] = "0";
  EXPECT_THAT(LoadTrainerConfig(Lookup(env), {}).status().message(),
              HasSubstr("RANK: must be (dp*PP + pp)*TP + tp"));
  v1::JobSpec small_vocab = Spec();
  small_vocab.mutable_trainer()->mutable_model()->set_vocab(100);
  EXPECT_THAT(LoadTrainerConfig(Lookup(AgentEnv(small_vocab)), {}).status().message(),
              HasSubstr("trainer.model.vocab: must be >= 128 for the built-in corpus"));
  auto none = LoadTrainerConfig(Lookup({}), {});
  EXPECT_THAT(none.status().message(), HasSubstr("--spec: is required"));
}

// An environment as the agent sets it for global rank `rank` of a tp x pp x dp job.
std::map<std::string, std::string> LayoutEnv(const v1::JobSpec& spec, int rank, int tp, int pp,
                                             int dp) {
  const RankPlace p = RankPlace::Of(rank, tp, pp, dp);
  auto env = AgentEnv(spec);
  env["RANK"] = std::to_string(rank);
  env["WORLD_SIZE"] = std::to_string(tp * pp * dp);
  env["RINGMASTER_TP_RANK"] = std::to_string(p.tp_rank);
  env["RINGMASTER_TP_SIZE"] = std::to_string(tp);
  env["RINGMASTER_PP_RANK"] = std::to_string(p.pp_rank);
  env["RINGMASTER_PP_SIZE"] = std::to_string(pp);
  env["RINGMASTER_DP_RANK"] = std::to_string(p.dp_rank);
  env["RINGMASTER_DP_SIZE"] = std::to_string(dp);
  env["RINGMASTER_GENERATION"] = "3";
  return env;
}

TEST(TrainerConfigTest, TensorPipelineAndDataLayoutsAreAccepted) {
  v1::JobSpec spec = Spec();
  spec.set_nodes(2);
  spec.set_devices_per_node(4);
  spec.mutable_parallelism()->set_tensor(2);
  spec.mutable_parallelism()->set_pipeline(2);
  spec.mutable_parallelism()->set_data(2);
  spec.mutable_trainer()->set_zero_stage(3);
  auto c = LoadTrainerConfig(Lookup(LayoutEnv(spec, 5, 2, 2, 2)), {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->place.tp_rank, 1);
  EXPECT_EQ(c->place.pp_rank, 0);
  EXPECT_EQ(c->place.dp_rank, 1);
  EXPECT_EQ(c->micro_steps, 2);  // 8 / (2 * 2)
  EXPECT_EQ(c->zero_stage, 3);
  EXPECT_EQ(c->generation, 3);
  EXPECT_EQ(c->checkpoint.generation, 3);  // the checkpoint directory's owner (its fence)
  EXPECT_EQ(c->checkpoint.job, "gpt-1");
}

// Every rank refuses a --nan_gradients_rank that does not compute a loss, not only that rank.
TEST(TrainerConfigTest, NanGradientsRankMustBeOnTheLastStage) {
  v1::JobSpec spec = Spec();
  spec.set_devices_per_node(4);
  spec.mutable_parallelism()->set_pipeline(2);
  TrainerFlags flags;
  flags.nan_gradients_at_step = 5;
  flags.nan_gradients_rank = 0;  // the first stage of the first replica
  auto c = LoadTrainerConfig(Lookup(LayoutEnv(spec, 2, 1, 2, 2)), flags);
  EXPECT_EQ(c.status().message(),
            "--nan_gradients_rank: rank 0 is on pipeline stage 0 of 2; only the last stage has a "
            "loss gradient");
  for (int bad : {4, -2}) {
    flags.nan_gradients_rank = bad;
    c = LoadTrainerConfig(Lookup(LayoutEnv(spec, 2, 1, 2, 2)), flags);
    EXPECT_EQ(c.status().message(),
              absl::StrCat("--nan_gradients_rank: must be -1 (every last-stage rank) or a rank < "
                           "WORLD_SIZE = 4, got ",
                           bad));
  }
  flags.nan_gradients_rank = 3;  // the last stage of the second replica
  c = LoadTrainerConfig(Lookup(LayoutEnv(spec, 2, 1, 2, 2)), flags);
  EXPECT_TRUE(c.ok()) << c.status();
}

TEST(TrainerConfigTest, LayoutsTheModelCannotBeSplitIntoAreFatalAndNameTheField) {
  // No layout in the spec (the coordinator planned one): the trainer checks the environment's.
  v1::JobSpec spec = Spec();
  spec.mutable_parallelism()->Clear();
  spec.set_devices_per_node(3);
  auto c = LoadTrainerConfig(Lookup(LayoutEnv(spec, 0, 3, 1, 1)), {});
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  EXPECT_THAT(c.status().message(),
              HasSubstr("parallelism.tensor: must divide model.heads (4), got 3"));
  spec.set_devices_per_node(4);
  c = LoadTrainerConfig(Lookup(LayoutEnv(spec, 0, 1, 4, 1)), {});
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  EXPECT_THAT(c.status().message(),
              HasSubstr("parallelism.pipeline: must be in [1, model.layers = 2] so every stage "
                        "holds a layer, got 4"));
}

}  // namespace
}  // namespace ringmaster::trainer
