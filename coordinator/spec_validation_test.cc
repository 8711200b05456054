#include "coordinator/spec_validation.h"

#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAreArray;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The example job of docs/architecture.md ("The job file"): 2 nodes x 4 devices, TP=2 PP=2 DP=2,
// defaults applied. Valid.
v1::JobSpec ValidSpec() {
  v1::JobSpec spec;
  spec.set_name("gpt-small");
  spec.set_nodes(2);
  spec.set_devices_per_node(4);
  spec.mutable_parallelism()->set_tensor(2);
  spec.mutable_parallelism()->set_pipeline(2);
  spec.mutable_parallelism()->set_data(2);
  v1::TrainerSpec* t = spec.mutable_trainer();
  t->set_builtin("gpt");
  v1::ModelSpec* m = t->mutable_model();
  m->set_layers(4);
  m->set_d_model(128);
  m->set_heads(4);
  m->set_seq_len(64);
  m->set_vocab(256);
  t->mutable_batch()->set_micro_batch(4);
  t->mutable_batch()->set_global_batch(64);
  t->set_steps(200);
  v1::OptimizerSpec* o = t->mutable_optimizer();
  o->set_lr(3e-4);
  o->set_warmup_steps(20);
  o->set_weight_decay(0.1);
  o->set_clip_grad_norm(1.0);
  t->set_precision(v1::PRECISION_BF16);
  t->set_zero_stage(1);
  spec.mutable_checkpoint()->set_dir("/var/lib/ringmaster/ckpt/gpt-small");
  spec.mutable_checkpoint()->set_every_steps(50);
  spec.mutable_checkpoint()->set_keep(3);
  spec.mutable_restart()->set_max_restarts(5);
  spec.mutable_watchdog()->set_straggler_threshold(1.2);
  ApplyDefaults(&spec);
  return spec;
}

std::vector<std::string> Lines(const absl::Status& status) {
  return absl::StrSplit(status.message(), '\n');
}

TEST(SpecValidationTest, DesignExampleIsValid) {
  EXPECT_TRUE(ValidateJobSpec(ValidSpec()).ok()) << ValidateJobSpec(ValidSpec());
}

TEST(SpecValidationTest, FusedAttentionIsValidForBf16HeadsOf32And64) {
  for (const int heads : {4, 2}) {  // 128 / 4 = 32 and 128 / 2 = 64 channels
    v1::JobSpec spec = ValidSpec();
    spec.mutable_trainer()->set_attention(v1::ATTENTION_FUSED);
    spec.mutable_trainer()->mutable_model()->set_heads(heads);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  }
}

TEST(SpecValidationTest, ASmallVocabularyIsValidWithItsOwnData) {
  v1::JobSpec spec = ValidSpec();
  spec.mutable_trainer()->mutable_model()->set_vocab(64);
  spec.mutable_trainer()->mutable_data()->set_path("/data/tokens.bin");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(SpecValidationTest, AnElasticJobWithAReachableMinimumIsValid) {
  v1::JobSpec spec = ValidSpec();
  spec.set_min_nodes(1);  // DP 2 -> 1: 64 sequences in 16 micro-batches of 4
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.set_min_nodes(2);  // = nodes: not elastic
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(SpecValidationTest, ElasticKeysAreJudgedWithTheRest) {
  v1::JobSpec spec = ValidSpec();
  spec.set_min_nodes(1);
  spec.set_elastic_wait_seconds(-2);
  spec.set_elastic_warmup_steps(-1);
  const absl::Status status = ValidateJobSpec(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  const std::vector<std::string> lines = Lines(status);
  ASSERT_EQ(lines.size(), 2u) << status;
  EXPECT_THAT(lines, ::testing::Contains(::testing::StartsWith("elastic_wait_seconds: ")));
  EXPECT_THAT(lines, ::testing::Contains(::testing::StartsWith("elastic_warmup_steps: ")));
}

TEST(SpecValidationTest, PlannerChosenLayoutSkipsLayoutRules) {
  v1::JobSpec spec = ValidSpec();
  spec.clear_parallelism();
  // Would break "layers >= pipeline" and "heads divisible by tensor" for most layouts;
  // without a layout only the layout-free rules apply.
  spec.mutable_trainer()->mutable_model()->set_layers(5);
  spec.mutable_trainer()->mutable_model()->set_heads(1);
  spec.mutable_trainer()->mutable_batch()->set_global_batch(12);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);

  // Without a layout global_batch must still be a whole number of microbatches.
  spec.mutable_trainer()->mutable_batch()->set_global_batch(10);
  absl::Status status = ValidateJobSpec(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Lines(status),
              ::testing::ElementsAre("trainer.batch.global_batch: must be divisible by micro_batch "
                                     "(4), got 10"));
}

// A user's program: name, shape and argv are all it needs (no steps, model, batch or optimizer),
// and the defaults add none of the builtin trainer's keys.
v1::JobSpec CommandSpec() {
  v1::JobSpec spec;
  spec.set_name("torch-job");
  spec.set_nodes(1);
  spec.set_devices_per_node(2);
  spec.mutable_trainer()->mutable_command()->add_argv("python3");
  spec.mutable_trainer()->mutable_command()->add_argv("train.py");
  return spec;
}

TEST(SpecValidationTest, CommandTrainerNeedsNoStepsModelBatchOrOptimizer) {
  v1::JobSpec spec = CommandSpec();
  ApplyDefaults(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_FALSE(spec.trainer().has_optimizer());
  EXPECT_FALSE(spec.trainer().has_data());
  EXPECT_EQ(spec.trainer().steps(), 0);

  spec.mutable_trainer()->set_steps(10);  // information for the program: allowed
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_trainer()->set_steps(-1);
  EXPECT_THAT(Lines(ValidateJobSpec(spec)),
              ::testing::ElementsAre("trainer.steps: must be in [0, 1000000000], got -1"));
  spec.mutable_trainer()->set_steps(0);

  // exec would cut an argument at a NUL byte.
  spec.mutable_trainer()->mutable_command()->set_argv(1, std::string("train.py\0--x", 12));
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()),
              HasSubstr("trainer.command[1]: must not contain a NUL byte, got "
                        "\"train.py\\x00--x\""));
}

// A torchrun command line (spec/torchrun.h): readable, and its world the job's (1 node x 2).
TEST(SpecValidationTest, ATorchrunCommandMustDescribeTheJobsWorld) {
  v1::JobSpec spec = CommandSpec();
  ApplyDefaults(&spec);
  const auto argv = [&spec](std::initializer_list<const char*> words) {
    spec.mutable_trainer()->mutable_command()->clear_argv();
    for (const char* word : words) spec.mutable_trainer()->mutable_command()->add_argv(word);
    const absl::Status status = ValidateJobSpec(spec);
    return status.ok() ? std::vector<std::string>() : Lines(status);
  };
  EXPECT_THAT(argv({"torchrun", "--nproc-per-node=2", "--nnodes", "1", "train.py"}), IsEmpty());
  EXPECT_THAT(argv({"python3", "-m", "torch.distributed.run", "--standalone", "-m", "pkg.t"}),
              IsEmpty());
  EXPECT_THAT(argv({"torchrun", "--nproc_per_node=8", "--nnodes=2", "train.py"}),
              ::testing::ElementsAre(
                  "trainer.command[1]: torchrun's --nproc_per_node must equal devices_per_node "
                  "(2: Ringmaster starts one rank per device), got 8",
                  "trainer.command[2]: torchrun's --nnodes must agree with nodes and min_nodes "
                  "(1), got \"2\""));
  EXPECT_THAT(argv({"torchrun", "--nproc_per_node=2", "--nnodes=1", "--max-restart=3"}),
              ::testing::ElementsAre("trainer.command: names no program after torchrun's "
                                     "options (torchrun ... train.py)"));
  EXPECT_THAT(argv({"bash", "-c", "cd /data && torchrun --nproc_per_node=2 train.py"}),
              ::testing::ElementsAre(HasSubstr(
                  "trainer.command[2]: must not start torchrun inside env, a wrapper (nohup, "
                  "timeout, numactl, ...) or a shell (each rank's torchrun would make a world "
                  "of its own)")));
  EXPECT_THAT(argv({"nohup", "torchrun", "--nproc_per_node=2", "train.py"}),
              ::testing::ElementsAre(HasSubstr("trainer.command[1]: must not start torchrun")));
  EXPECT_THAT(argv({"accelerate", "launch", "--multi_gpu", "train.py"}),
              ::testing::ElementsAre(HasSubstr(
                  "trainer.command[0]: must not run `accelerate launch`, which starts its own "
                  "processes and world on each node")));
  EXPECT_THAT(argv({"torchrun", "--nproc_per_node=2", "--no_python", "deepspeed", "t.py"}),
              ::testing::ElementsAre(HasSubstr(
                  "trainer.command[3]: must not run the deepspeed launcher")));
  EXPECT_THAT(argv({"torchrun", "--nproc_per_node=2", "--no_python", "nohup", "torchrun", "t"}),
              ::testing::ElementsAre(HasSubstr(
                  "trainer.command[4]: must not start torchrun in the program torchrun "
                  "--no_python runs")));
  EXPECT_THAT(argv({"torchrun", "--nproc_per_node=2", "--no_python", "python3", "t.py"}),
              IsEmpty());
  EXPECT_THAT(argv({"bash", "-c", "cd /d && deepspeed train.py"}),
              ::testing::ElementsAre(HasSubstr(
                  "trainer.command[2]: must not run the deepspeed launcher")));
  EXPECT_THAT(argv({"torchrun", "--master", "h", "train.py"}),
              ::testing::ElementsAre("trainer.command[1]: \"--master\" is ambiguous: it may be "
                                     "--master_addr, --master_port"));
}

TEST(SpecValidationTest, CommandJobRefusesEveryKeyOnlyTheBuiltinTrainerReads) {
  v1::JobSpec spec = CommandSpec();
  v1::TrainerSpec* t = spec.mutable_trainer();
  t->mutable_model()->set_layers(2);
  t->mutable_batch();                  // present, even empty
  t->mutable_optimizer()->set_lr(-1);  // refused as a key, not judged as a value
  t->set_precision(v1::PRECISION_BF16);
  t->set_attention(v1::ATTENTION_FUSED);
  t->set_zero_stage(9);
  t->mutable_data()->set_path("/data/tokens.bin");
  ApplyDefaults(&spec);
  const std::string rule =
      ": only the builtin trainer reads it; a command job's program takes its settings from its "
      "own argv and trainer.env (remove the key, or use builtin: gpt)";
  EXPECT_THAT(Lines(ValidateJobSpec(spec)),
              ::testing::ElementsAre("trainer.model" + rule, "trainer.batch" + rule,
                                     "trainer.optimizer" + rule, "trainer.precision" + rule,
                                     "trainer.attention" + rule, "trainer.zero_stage" + rule,
                                     "trainer.data" + rule));
  // What the agent passes still counts: a NUL byte in data.path is reported too.
  t->mutable_data()->set_path(std::string("a\0b", 3));
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()),
              HasSubstr("trainer.data.path: must not contain a NUL byte"));
}

TEST(SpecValidationTest, TheTrainersOwnProgramAsACommandReadsTheBuiltinKeys) {
  // Tests and benches run the builtin trainer as a command to pass it flags: it reads the model,
  // batch and optimizer as a builtin job does, and gets their defaults.
  v1::JobSpec spec = ValidSpec();
  spec.mutable_trainer()->mutable_command()->add_argv("/opt/ringmaster/trainer");
  spec.mutable_trainer()->mutable_command()->add_argv("--exit_after_step=3");
  spec.mutable_trainer()->clear_optimizer();
  ApplyDefaults(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_DOUBLE_EQ(spec.trainer().optimizer().lr(), 3e-4);
  // Its steps are the trainer's: required.
  spec.mutable_trainer()->set_steps(0);
  EXPECT_THAT(Lines(ValidateJobSpec(spec)),
              ::testing::ElementsAre("trainer.steps: must be in [1, 1000000000], got 0"));
}

struct RuleCase {
  std::string name;
  std::function<void(v1::JobSpec*)> mutate;
  // The one line expected (as a substring of it: "field: rule").
  std::string expected;
  // Lines expected in all (the mutation may break dependent rules too).
  int problems = 1;
};

std::ostream& operator<<(std::ostream& os, const RuleCase& c) { return os << c.name; }

v1::ModelSpec* Model(v1::JobSpec* s) { return s->mutable_trainer()->mutable_model(); }
v1::BatchSpec* Batch(v1::JobSpec* s) { return s->mutable_trainer()->mutable_batch(); }
v1::OptimizerSpec* Opt(v1::JobSpec* s) { return s->mutable_trainer()->mutable_optimizer(); }
v1::ParallelismSpec* Par(v1::JobSpec* s) { return s->mutable_parallelism(); }
// `s` as a command job: its shape, without the keys only the builtin trainer reads.
v1::CommandSpec* Command(v1::JobSpec* s) {
  v1::TrainerSpec* t = s->mutable_trainer();
  t->clear_model();
  t->clear_batch();
  t->clear_optimizer();
  t->clear_precision();
  t->clear_attention();
  t->clear_zero_stage();
  t->clear_data();
  return t->mutable_command();
}

class RuleTest : public ::testing::TestWithParam<RuleCase> {};

TEST_P(RuleTest, OneMutationOneClearProblem) {
  const RuleCase& c = GetParam();
  v1::JobSpec spec = ValidSpec();
  c.mutate(&spec);
  absl::Status status = ValidateJobSpec(spec);
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(c.expected));
  std::vector<std::string> lines = Lines(status);
  EXPECT_EQ(static_cast<int>(lines.size()), c.problems) << status.message();
  for (const std::string& line : lines) EXPECT_THAT(line, HasSubstr(", got ")) << line;
}

INSTANTIATE_TEST_SUITE_P(
    Rules, RuleTest,
    ::testing::ValuesIn(std::vector<RuleCase>{
        // name
        // min_nodes (spec/elastic.h)
        {"MinNodesAboveNodes", [](v1::JobSpec* s) { s->set_min_nodes(3); },
         "min_nodes: must be in [1, 2], got 3"},
        {"MinNodesNegative", [](v1::JobSpec* s) { s->set_min_nodes(-1); },
         "min_nodes: must be in [1, 2], got -1"},
        {"MinNodesUnreachable",
         [](v1::JobSpec* s) {
           // DP 4 on 4 nodes: 3 nodes would be DP 3, which does not divide 64 with micro 4.
           s->set_nodes(4);
           s->set_devices_per_node(2);
           Par(s)->set_pipeline(1);
           Par(s)->set_data(4);
           s->set_min_nodes(3);
         },
         "min_nodes: must leave a size below nodes reachable: only the data-parallel degree (4 "
         "at 4 nodes) shrinks with the nodes, and at no size in [3, 3] nodes is it a whole "
         "number dividing trainer.batch.global_batch (64) with micro_batch (4), got 3"},
        // spares (hot spares, coordinator/job_manager_spares.cc)
        {"SparesNegative", [](v1::JobSpec* s) { s->set_spares(-1); },
         "spares: must be in [0, 64], got -1"},
        {"SparesTooMany", [](v1::JobSpec* s) { s->set_spares(65); },
         "spares: must be in [0, 64], got 65"},
        {"NameEmpty", [](v1::JobSpec* s) { s->set_name(""); },
         "name: must be 1-63 characters of [a-z0-9-] starting with a letter, got \"\""},
        {"NameUpper", [](v1::JobSpec* s) { s->set_name("Gpt"); },
         "name: must be 1-63 characters of [a-z0-9-] starting with a letter, got \"Gpt\""},
        {"NameDigitFirst", [](v1::JobSpec* s) { s->set_name("1gpt"); }, "got \"1gpt\""},
        {"NameUnderscore", [](v1::JobSpec* s) { s->set_name("gpt_small"); }, "name: must be"},
        {"NameNewlineEscaped", [](v1::JobSpec* s) { s->set_name("a\nb"); }, "got \"a\\nb\""},
        {"NameTooLong", [](v1::JobSpec* s) { s->set_name("a" + std::string(63, 'b')); },
         "name: must be 1-63 characters"},
        {"NameHugeIsQuotedCut", [](v1::JobSpec* s) { s->set_name(std::string(100000, 'x')); },
         // The spec's size limit breaks too.
         "got \"" + std::string(64, 'x') + "\"... (100000 bytes)", 2},
        {"TokensPerMicroBatchOverflow",
         [](v1::JobSpec* s) {
           Batch(s)->set_micro_batch(1 << 26);
           Batch(s)->set_global_batch(int64_t{1} << 28);
         },
         "trainer.batch.micro_batch: micro_batch*model.seq_len (tokens per micro-batch) must be "
         "at most 2147483647, got 67108864*64 = 4294967296"},
        // what the agent passes to exec
        {"EnvReservedName",
         [](v1::JobSpec* s) { (*s->mutable_trainer()->mutable_env())["RANK"] = "0"; },
         "trainer.env.RANK: is set by the agent for every worker"},
        {"EnvReservedPrefix",
         [](v1::JobSpec* s) { (*s->mutable_trainer()->mutable_env())["RINGMASTER_JOB"] = "x"; },
         "trainer.env.RINGMASTER_JOB: is set by the agent"},
        {"EnvDevices",
         [](v1::JobSpec* s) { (*s->mutable_trainer()->mutable_env())["CUDA_VISIBLE_DEVICES"] = "0"; },
         "trainer.env.CUDA_VISIBLE_DEVICES: is set by the agent"},
        {"EnvNameWithEquals",
         [](v1::JobSpec* s) { (*s->mutable_trainer()->mutable_env())["A=B"] = "x"; },
         "trainer.env: names must be [A-Za-z_][A-Za-z0-9_]*, got \"A=B\""},
        {"EnvNameEmpty", [](v1::JobSpec* s) { (*s->mutable_trainer()->mutable_env())[""] = "x"; },
         "trainer.env: names must be [A-Za-z_][A-Za-z0-9_]*, got \"\""},
        {"EnvValueNul",
         [](v1::JobSpec* s) {
           (*s->mutable_trainer()->mutable_env())["NCCL_DEBUG"] = std::string("IN\0FO", 5);
         },
         "trainer.env.NCCL_DEBUG: must not contain a NUL byte, got \"IN\\x00\\x46O\""},
        {"EnvTooMany",
         [](v1::JobSpec* s) {
           for (int i = 0; i < 257; ++i) {
             (*s->mutable_trainer()->mutable_env())[absl::StrCat("V", i)] = "1";
           }
         },
         "trainer.env: must have at most 256 variables, got 257"},
        {"SpecTooBig",
         [](v1::JobSpec* s) {
           (*s->mutable_trainer()->mutable_env())["BIG"] = std::string(140 * 1024, 'x');
         },
         "spec: must be at most 65536 bytes as JSON (workers get it in one environment "
         "variable), got 1"},
        {"SpecTooBigOnlyAsJson",
         [](v1::JobSpec* s) {
           // 40 KB serialized, but each control character is 6 bytes of JSON.
           (*s->mutable_trainer()->mutable_env())["CTL"] = std::string(40 * 1024, '\x01');
         },
         "spec: must be at most 65536 bytes as JSON (workers get it in one environment "
         "variable), got 2"},
        {"CheckpointDirNul",
         [](v1::JobSpec* s) { s->mutable_checkpoint()->set_dir(std::string("/a\0b", 4)); },
         "checkpoint.dir: must not contain a NUL byte, got \"/a\\x00\\x62\""},
        // nodes, devices_per_node
        {"NodesZero", [](v1::JobSpec* s) { s->set_nodes(0); },
         "nodes: must be in [1, 100000], got 0"},
        {"NodesNegative", [](v1::JobSpec* s) { s->set_nodes(-2); },
         "nodes: must be in [1, 100000], got -2"},
        {"NodesAbsurd", [](v1::JobSpec* s) { s->set_nodes(100001); },
         "nodes: must be in [1, 100000], got 100001"},
        {"DevicesZero", [](v1::JobSpec* s) { s->set_devices_per_node(0); },
         "devices_per_node: must be in [1, 1024], got 0"},
        {"DevicesAbsurd", [](v1::JobSpec* s) { s->set_devices_per_node(2048); },
         "devices_per_node: must be in [1, 1024], got 2048"},
        // parallelism
        {"WorldMismatch", [](v1::JobSpec* s) { Par(s)->set_data(4); },
         "parallelism: tensor*pipeline*data must equal nodes*devices_per_node (2*4 = 8), got "
         "2*2*4 = 16"},
        {"WorldMismatchHugeDegrees",
         [](v1::JobSpec* s) {
           Par(s)->set_pipeline(std::numeric_limits<int32_t>::max());
           Par(s)->set_data(std::numeric_limits<int32_t>::max());
           Par(s)->set_tensor(1 << 30);
         },
         // 2^30 divides nothing here: tensor, heads, layers and global batch rules break too.
         "got 1073741824*2147483647*2147483647\n", 5},
        {"TensorDoesNotDivideDevicesPerNode",
         [](v1::JobSpec* s) {
           Par(s)->set_tensor(8);
           Par(s)->set_pipeline(1);
           Par(s)->set_data(1);
           Model(s)->set_heads(8);
         },
         "parallelism.tensor: must divide devices_per_node (4), got 8"},
        {"PartialLayout",
         [](v1::JobSpec* s) {
           Par(s)->set_pipeline(0);
         },
         "parallelism.pipeline: must be >= 1 (or set tensor, pipeline and data all to 0 to let "
         "the planner choose), got 0"},
        {"NegativeDegree", [](v1::JobSpec* s) { Par(s)->set_data(-2); },
         "parallelism.data: must be >= 1"},
        // trainer program
        {"NoProgram", [](v1::JobSpec* s) { s->mutable_trainer()->clear_program(); },
         "trainer: must set exactly one of builtin and command, got neither"},
        {"UnknownBuiltin", [](v1::JobSpec* s) { s->mutable_trainer()->set_builtin("bert"); },
         "trainer.builtin: must be \"gpt\" (the only built-in trainer), got \"bert\""},
        {"EmptyCommand", [](v1::JobSpec* s) { Command(s); },
         "trainer.command: must be a non-empty argv list, got []"},
        {"EmptyArgv0",
         [](v1::JobSpec* s) {
           Command(s)->add_argv("");
           Command(s)->add_argv("train.py");
         },
         "trainer.command[0]: must not be empty"},
        // model
        {"LayersZero", [](v1::JobSpec* s) { Model(s)->set_layers(0); },
         "trainer.model.layers: must be in [1, 1024], got 0"},
        {"LayersAbsurd", [](v1::JobSpec* s) { Model(s)->set_layers(1026); },
         "trainer.model.layers: must be in [1, 1024], got 1026"},
        {"DModelNegative", [](v1::JobSpec* s) { Model(s)->set_d_model(-128); },
         "trainer.model.d_model: must be in [1, 65536], got -128"},
        {"DModelAbsurd", [](v1::JobSpec* s) { Model(s)->set_d_model(65540); },
         "trainer.model.d_model: must be in [1, 65536], got 65540"},
        {"HeadsZero", [](v1::JobSpec* s) { Model(s)->set_heads(0); },
         "trainer.model.heads: must be in [1, 1024], got 0"},
        {"HeadsAbsurd", [](v1::JobSpec* s) { Model(s)->set_heads(2048); },
         "trainer.model.heads: must be in [1, 1024], got 2048"},
        {"SeqLenZero", [](v1::JobSpec* s) { Model(s)->set_seq_len(0); },
         "trainer.model.seq_len: must be in [1, 1048576], got 0"},
        {"SeqLenAbsurd", [](v1::JobSpec* s) { Model(s)->set_seq_len(1048577); },
         "trainer.model.seq_len: must be in [1, 1048576], got 1048577"},
        {"VocabNegative", [](v1::JobSpec* s) { Model(s)->set_vocab(-1); },
         "trainer.model.vocab: must be in [1, 10000000], got -1"},
        {"VocabAbsurd", [](v1::JobSpec* s) { Model(s)->set_vocab(10000001); },
         "trainer.model.vocab: must be in [1, 10000000], got 10000001"},
        {"VocabBelowTheBuiltinCorpus", [](v1::JobSpec* s) { Model(s)->set_vocab(64); },
         "trainer.model.vocab: must be >= 128 for the built-in corpus (ASCII byte tokens; "
         "data.path names your own), got 64"},
        {"DModelNotDivisibleByHeads", [](v1::JobSpec* s) { Model(s)->set_d_model(130); },
         "trainer.model.d_model: must be divisible by heads (4), got 130"},
        {"FewerLayersThanPipelineStages", [](v1::JobSpec* s) { Model(s)->set_layers(1); },
         "trainer.model.layers: must be >= parallelism.pipeline (2) so every pipeline stage holds "
         "a layer, got 1"},
        {"HeadsNotDivisibleByTensor", [](v1::JobSpec* s) { Model(s)->set_heads(1); },
         "trainer.model.heads: must be divisible by parallelism.tensor (2), got 1"},
        // batch
        {"MicroBatchZero", [](v1::JobSpec* s) { Batch(s)->set_micro_batch(0); },
         "trainer.batch.micro_batch: must be >= 1, got 0"},
        {"GlobalBatchZero", [](v1::JobSpec* s) { Batch(s)->set_global_batch(0); },
         "trainer.batch.global_batch: must be >= 1, got 0"},
        {"GlobalBatchNegative", [](v1::JobSpec* s) { Batch(s)->set_global_batch(-64); },
         "trainer.batch.global_batch: must be >= 1, got -64"},
        {"GlobalBatchNotDivisible", [](v1::JobSpec* s) { Batch(s)->set_global_batch(60); },
         "trainer.batch.global_batch: must be divisible by micro_batch*parallelism.data (4*2 = "
         "8), got 60"},
        // steps
        {"StepsZero", [](v1::JobSpec* s) { s->mutable_trainer()->set_steps(0); },
         "trainer.steps: must be in [1, 1000000000], got 0"},
        {"StepsAbsurd", [](v1::JobSpec* s) { s->mutable_trainer()->set_steps(1000000001); },
         "trainer.steps: must be in [1, 1000000000], got 1000000001"},
        // optimizer
        {"LrZero", [](v1::JobSpec* s) { Opt(s)->set_lr(0); },
         "trainer.optimizer.lr: must be in (0, 10], got 0"},
        {"LrNegative", [](v1::JobSpec* s) { Opt(s)->set_lr(-0.001); },
         "trainer.optimizer.lr: must be in (0, 10], got -0.001"},
        {"LrAbsurd", [](v1::JobSpec* s) { Opt(s)->set_lr(10.5); },
         "trainer.optimizer.lr: must be in (0, 10], got 10.5"},
        {"LrNaN", [](v1::JobSpec* s) { Opt(s)->set_lr(kNaN); },
         "trainer.optimizer.lr: must be a finite number, got nan"},
        {"LrInf", [](v1::JobSpec* s) { Opt(s)->set_lr(kInf); },
         "trainer.optimizer.lr: must be a finite number, got inf"},
        {"WarmupNegative", [](v1::JobSpec* s) { Opt(s)->set_warmup_steps(-1); },
         "trainer.optimizer.warmup_steps: must be >= 0, got -1"},
        {"WeightDecayNegative", [](v1::JobSpec* s) { Opt(s)->set_weight_decay(-0.1); },
         "trainer.optimizer.weight_decay: must be >= 0, got -0.1"},
        {"WeightDecayNaN", [](v1::JobSpec* s) { Opt(s)->set_weight_decay(-kNaN); },
         "trainer.optimizer.weight_decay: must be a finite number, got nan"},
        {"ClipNegative", [](v1::JobSpec* s) { Opt(s)->set_clip_grad_norm(-1); },
         "trainer.optimizer.clip_grad_norm: must be >= 0 (0 disables clipping), got -1"},
        {"ClipInf", [](v1::JobSpec* s) { Opt(s)->set_clip_grad_norm(kInf); },
         "trainer.optimizer.clip_grad_norm: must be a finite number, got inf"},
        {"MinLrNegative", [](v1::JobSpec* s) { Opt(s)->set_min_lr(-1e-5); },
         "trainer.optimizer.min_lr: must be in [0, lr (0.0003)], got -1e-05"},
        {"MinLrAboveLr", [](v1::JobSpec* s) { Opt(s)->set_min_lr(1e-3); },
         "trainer.optimizer.min_lr: must be in [0, lr (0.0003)], got 0.001"},
        {"MinLrNaN", [](v1::JobSpec* s) { Opt(s)->set_min_lr(kNaN); },
         "trainer.optimizer.min_lr: must be a finite number, got nan"},
        {"Beta1One", [](v1::JobSpec* s) { Opt(s)->set_beta1(1.0); },
         "trainer.optimizer.beta1: must be in [0, 1), got 1"},
        {"Beta1Negative", [](v1::JobSpec* s) { Opt(s)->set_beta1(-0.5); },
         "trainer.optimizer.beta1: must be in [0, 1), got -0.5"},
        {"Beta2Above", [](v1::JobSpec* s) { Opt(s)->set_beta2(1.5); },
         "trainer.optimizer.beta2: must be in [0, 1), got 1.5"},
        {"Beta2NegInf", [](v1::JobSpec* s) { Opt(s)->set_beta2(-kInf); },
         "trainer.optimizer.beta2: must be a finite number, got -inf"},
        {"EpsilonZero", [](v1::JobSpec* s) { Opt(s)->set_epsilon(0); },
         "trainer.optimizer.epsilon: must be > 0, got 0"},
        {"EpsilonNegative", [](v1::JobSpec* s) { Opt(s)->set_epsilon(-1e-8); },
         "trainer.optimizer.epsilon: must be > 0, got -1e-08"},
        // precision, zero_stage
        {"PrecisionUndefined",
         [](v1::JobSpec* s) { s->mutable_trainer()->set_precision(static_cast<v1::Precision>(7)); },
         "trainer.precision: must be fp32 or bf16 (or unset), got 7"},
        // attention
        {"AttentionUndefined",
         [](v1::JobSpec* s) { s->mutable_trainer()->set_attention(static_cast<v1::Attention>(9)); },
         "trainer.attention: must be fused or materialized (or unset), got 9"},
        {"AttentionFusedInFp32",
         [](v1::JobSpec* s) {
           s->mutable_trainer()->set_attention(v1::ATTENTION_FUSED);
           s->mutable_trainer()->set_precision(v1::PRECISION_FP32);
         },
         "trainer.attention: must not be fused with precision fp32 (the fused kernels run in "
         "bf16), got fused"},
        {"AttentionFusedHeadOf16",
         [](v1::JobSpec* s) {
           s->mutable_trainer()->set_attention(v1::ATTENTION_FUSED);
           s->mutable_trainer()->mutable_model()->set_heads(8);
         },
         "trainer.attention: fused needs heads of 32 or 64 channels (model.d_model / "
         "model.heads), got 128 / 8 = 16"},
        {"ZeroStageNegative", [](v1::JobSpec* s) { s->mutable_trainer()->set_zero_stage(-1); },
         "trainer.zero_stage: must be in [0, 3], got -1"},
        {"ZeroStageAbsurd", [](v1::JobSpec* s) { s->mutable_trainer()->set_zero_stage(4); },
         "trainer.zero_stage: must be in [0, 3], got 4"},
        // checkpoint
        {"CheckpointEveryNegative",
         [](v1::JobSpec* s) { s->mutable_checkpoint()->set_every_steps(-5); },
         "checkpoint.every_steps: must be >= 0 (0 disables periodic checkpoints), got -5"},
        {"CheckpointKeepZero", [](v1::JobSpec* s) { s->mutable_checkpoint()->set_keep(0); },
         "checkpoint.keep: must be >= 1, got 0"},
        {"CheckpointKeepNegative", [](v1::JobSpec* s) { s->mutable_checkpoint()->set_keep(-3); },
         "checkpoint.keep: must be >= 1, got -3"},
        {"CheckpointDirMissing", [](v1::JobSpec* s) { s->mutable_checkpoint()->clear_dir(); },
         "checkpoint.dir: is required when every_steps > 0 (every_steps is 50), got \"\""},
        {"CheckpointDirClimbsOut",
         [](v1::JobSpec* s) { s->mutable_checkpoint()->set_dir("/tmp/../etc"); },
         "checkpoint.dir: must not have \"..\" components (name the directory itself), got "
         "\"/tmp/../etc\""},
        {"CheckpointDirRelativeClimbsOut",
         [](v1::JobSpec* s) { s->mutable_checkpoint()->set_dir("ckpt/../../x"); },
         "checkpoint.dir: must not have \"..\" components (name the directory itself), got "
         "\"ckpt/../../x\""},
        {"CheckpointDirInProc",
         [](v1::JobSpec* s) { s->mutable_checkpoint()->set_dir("/proc/self"); },
         "checkpoint.dir: must not be in /proc, /sys or /dev (the kernel's pseudo-filesystems, "
         "not storage), got \"/proc/self\""},
        {"CheckpointDirIsSys", [](v1::JobSpec* s) { s->mutable_checkpoint()->set_dir("/sys"); },
         "checkpoint.dir: must not be in /proc, /sys or /dev (the kernel's pseudo-filesystems, "
         "not storage), got \"/sys\""},
        {"CheckpointDirInDevBehindDots",
         [](v1::JobSpec* s) { s->mutable_checkpoint()->set_dir("//./dev/shm/ckpt"); },
         "checkpoint.dir: must not be in /proc, /sys or /dev (the kernel's pseudo-filesystems, "
         "not storage), got \"//./dev/shm/ckpt\""},
        {"CheckpointMaxFailuresNegative",
         [](v1::JobSpec* s) { s->mutable_checkpoint()->set_max_consecutive_failures(-1); },
         "checkpoint.max_consecutive_failures: must be in [0, 1000000], got -1"},
        // restart, watchdog
        {"RestartsNegative", [](v1::JobSpec* s) { s->mutable_restart()->set_max_restarts(-1); },
         "restart.max_restarts: must be in [0, 1000], got -1"},
        {"RestartsAbsurd", [](v1::JobSpec* s) { s->mutable_restart()->set_max_restarts(1001); },
         "restart.max_restarts: must be in [0, 1000], got 1001"},
        {"RestartWindowNegative",
         [](v1::JobSpec* s) { s->mutable_restart()->set_window_minutes(-5); },
         "restart.window_minutes: must be in [0, 525600], got -5"},
        {"RestartWindowOverAYear",
         [](v1::JobSpec* s) { s->mutable_restart()->set_window_minutes(525601); },
         "restart.window_minutes: must be in [0, 525600], got 525601"},
        {"HangTimeoutNegative",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_hang_timeout_seconds(-30); },
         "watchdog.hang_timeout: must be >= 0 seconds (0 means auto), got -30"},
        {"HangTimeoutNaN",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_hang_timeout_seconds(kNaN); },
         "watchdog.hang_timeout: must be a finite number, got nan"},
        {"HangTimeoutInf",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_hang_timeout_seconds(kInf); },
         "watchdog.hang_timeout: must be a finite number, got inf"},
        {"InitTimeoutNegative",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_init_timeout_seconds(-1); },
         "watchdog.init_timeout: must be >= 0 seconds (0 means auto), got -1"},
        {"InitTimeoutNaN",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_init_timeout_seconds(kNaN); },
         "watchdog.init_timeout: must be a finite number, got nan"},
        {"CheckpointTimeoutNegative",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_checkpoint_timeout_seconds(-0.5); },
         "watchdog.checkpoint_timeout: must be >= 0 seconds (0 means auto), got -0.5"},
        {"CheckpointTimeoutInf",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_checkpoint_timeout_seconds(kInf); },
         "watchdog.checkpoint_timeout: must be a finite number, got inf"},
        {"StragglerOne", [](v1::JobSpec* s) { s->mutable_watchdog()->set_straggler_threshold(1); },
         "watchdog.straggler_threshold: must be > 1, got 1"},
        {"StragglerBelowOne",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_straggler_threshold(0.5); },
         "watchdog.straggler_threshold: must be > 1, got 0.5"},
        {"StragglerNaN",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_straggler_threshold(kNaN); },
         "watchdog.straggler_threshold: must be a finite number, got nan"},
        {"LinkCheckBytesNegative",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_link_check_bytes(-4); },
         "watchdog.link_check_bytes: must be in [1, 1073741824], got -4"},
        {"LinkCheckBytesAbsurd",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_link_check_bytes(int64_t{1} << 31); },
         "watchdog.link_check_bytes: must be in [1, 1073741824], got 2147483648"},
        {"SlowLinkRatioOne", [](v1::JobSpec* s) { s->mutable_watchdog()->set_slow_link_ratio(1); },
         "watchdog.slow_link_ratio: must be in (0, 1): a fraction of the median of the other "
         "links, got 1"},
        {"SlowLinkRatioNegative",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_slow_link_ratio(-0.5); },
         "watchdog.slow_link_ratio: must be in (0, 1)"},
        {"LinkFloorNegative",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_min_link_bytes_per_second(-1e9); },
         "watchdog.min_link_bytes_per_second: must be >= 0 (0: no floor), got -1000000000"},
        {"SlowLinkRatioNaN",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_slow_link_ratio(kNaN); },
         "watchdog.slow_link_ratio: must be a finite number, got nan"},
        {"AutoLinkCheckIntervalTooShort",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_auto_link_check_interval_seconds(0.5); },
         "watchdog.auto_link_check_interval: must be 0 (the default, 60) or in [1, 86400] "
         "seconds, got 0.5"},
        {"AutoLinkCheckIntervalNegative",
         [](v1::JobSpec* s) { s->mutable_watchdog()->set_auto_link_check_interval_seconds(-60); },
         "watchdog.auto_link_check_interval: must be 0 (the default, 60) or in [1, 86400]"},
        {"AutoLinkCheckIntervalNaN",
         [](v1::JobSpec* s) {
           s->mutable_watchdog()->set_auto_link_check_interval_seconds(kNaN);
         },
         "watchdog.auto_link_check_interval: must be a finite number, got nan"},
    }),
    [](const ::testing::TestParamInfo<RuleCase>& info) { return info.param.name; });

// Directories that merely look like the refused ones pass.
TEST(SpecValidationTest, CheckpointDirsNearTheRefusedOnesPass) {
  for (const char* dir : {"/procs/ckpt", "/srv/proc/ckpt", "/data/..ckpt", "/data/ckpt..",
                          "/devices/ckpt", "/mnt/./ckpt", "ckpt/run1"}) {
    v1::JobSpec spec = ValidSpec();
    spec.mutable_checkpoint()->set_dir(dir);
    spec.mutable_checkpoint()->set_max_consecutive_failures(5);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << dir << ": " << ValidateJobSpec(spec);
  }
}

// A spec submitted to the coordinator names absolute paths: its ranks start in their agents'
// working directories. The trainer's own check (ValidateJobSpec) leaves relative ones to a run
// by hand, which resolves them in its own directory.
TEST(SpecValidationTest, ClusterPathsMustBeAbsolute) {
  v1::JobSpec spec = ValidSpec();
  EXPECT_TRUE(ValidateClusterPaths(spec).ok()) << ValidateClusterPaths(spec);
  spec.mutable_checkpoint()->set_dir("ckpt/run1");
  spec.mutable_trainer()->mutable_data()->set_path("./tokens.bin");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  const absl::Status relative = ValidateClusterPaths(spec);
  EXPECT_EQ(relative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(relative.message(),
            "checkpoint.dir: must be an absolute path (ranks start in their agent's working "
            "directory, which differs from node to node), got \"ckpt/run1\"\n"
            "trainer.data.path: must be an absolute path (ranks start in their agent's working "
            "directory, which differs from node to node), got \"./tokens.bin\"");
  spec.mutable_checkpoint()->clear_dir();
  spec.mutable_trainer()->mutable_data()->clear_path();
  EXPECT_TRUE(ValidateClusterPaths(spec).ok()) << "no path, nothing to resolve";
}

TEST(SpecValidationTest, ReportsEveryProblemOnItsOwnLine) {
  v1::JobSpec spec = ValidSpec();
  spec.set_name("GPT");
  spec.mutable_parallelism()->set_tensor(
      3);  // 3*2*2 != 8; 3 divides neither 4 devices nor 4 heads.
  spec.mutable_trainer()->mutable_model()->set_layers(3);         // Not divisible by pipeline 2.
  spec.mutable_trainer()->mutable_batch()->set_global_batch(12);  // Not divisible by 4*2.
  spec.mutable_trainer()->mutable_optimizer()->set_beta2(kNaN);
  spec.mutable_checkpoint()->set_keep(-1);
  spec.mutable_watchdog()->set_straggler_threshold(0.9);

  absl::Status status = ValidateJobSpec(spec);
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      Lines(status),
      UnorderedElementsAreArray({
          "name: must be 1-63 characters of [a-z0-9-] starting with a letter, got \"GPT\"",
          "parallelism: tensor*pipeline*data must equal nodes*devices_per_node (2*4 = 8), got "
          "3*2*2 = 12",
          "parallelism.tensor: must divide devices_per_node (4), got 3",
          "trainer.model.heads: must be divisible by parallelism.tensor (3), got 4",
          "trainer.batch.global_batch: must be divisible by micro_batch*parallelism.data (4*2 = "
          "8), got 12",
          "trainer.optimizer.beta2: must be a finite number, got nan",
          "checkpoint.keep: must be >= 1, got -1",
          "watchdog.straggler_threshold: must be > 1, got 0.9",
      }));
}

TEST(SpecValidationTest, EmptySpecNamesEveryRequiredField) {
  v1::JobSpec spec;
  ApplyDefaults(&spec);
  absl::Status status = ValidateJobSpec(spec);
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  for (const char* field : {"name: ", "nodes: ", "devices_per_node: ", "trainer: ",
                            "trainer.steps: ", "trainer.optimizer.lr: "}) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(field)) << field;
  }
}

TEST(ApplyDefaultsTest, FillsDocumentedDefaults) {
  v1::JobSpec spec;
  spec.mutable_trainer()->set_builtin("gpt");
  spec.mutable_trainer()->set_steps(200);
  ApplyDefaults(&spec);
  const v1::OptimizerSpec& o = spec.trainer().optimizer();
  EXPECT_EQ(o.lr(), 3e-4);
  EXPECT_EQ(o.warmup_steps(), 10);  // 5% of 200 steps
  EXPECT_EQ(o.weight_decay(), 0.1);
  EXPECT_EQ(o.clip_grad_norm(), 1.0);
  EXPECT_DOUBLE_EQ(o.min_lr(), 3e-5);
  EXPECT_EQ(o.beta1(), 0.9);
  EXPECT_EQ(o.beta2(), 0.95);
  EXPECT_EQ(o.epsilon(), 1e-8);
  EXPECT_EQ(spec.checkpoint().keep(), 3);
  EXPECT_EQ(spec.restart().max_restarts(), 3);
  EXPECT_EQ(spec.restart().window_minutes(), 0);  // every restart counts
  EXPECT_EQ(spec.watchdog().straggler_threshold(), 1.2);
  EXPECT_EQ(spec.watchdog().link_check_bytes(), 4 << 20);
  EXPECT_EQ(spec.watchdog().slow_link_ratio(), 0.5);
  EXPECT_FALSE(spec.watchdog().link_check_disabled());
  EXPECT_FALSE(spec.watchdog().auto_link_check_disabled());
  EXPECT_EQ(spec.watchdog().auto_link_check_interval_seconds(), 60);
  EXPECT_EQ(spec.trainer().data().seed(), 1234u);
  EXPECT_EQ(spec.trainer().steps(), 200);                // Stays as given.
  EXPECT_EQ(spec.watchdog().hang_timeout_seconds(), 0);  // 0 is "auto", not unset.
  EXPECT_EQ(spec.checkpoint().every_steps(), 0);
}

TEST(ApplyDefaultsTest, WarmupIsFivePercentOfTheStepsAtMostAThousand) {
  for (const auto& [steps, warmup] : std::vector<std::pair<int64_t, int32_t>>{
           {0, 0}, {19, 0}, {20, 1}, {200, 10}, {20000, 1000}, {1000000000, 1000}, {-40, 0}}) {
    v1::JobSpec spec;
    spec.mutable_trainer()->set_builtin("gpt");
    spec.mutable_trainer()->set_steps(steps);
    ApplyDefaults(&spec);
    EXPECT_EQ(spec.trainer().optimizer().warmup_steps(), warmup) << steps;
    EXPECT_TRUE(spec.trainer().optimizer().has_warmup_steps());
  }
}

TEST(ApplyDefaultsTest, ABuiltinJobWithoutAnOptimizerIsValid) {
  v1::JobSpec spec = ValidSpec();
  spec.mutable_trainer()->clear_optimizer();
  spec.mutable_trainer()->clear_data();
  ApplyDefaults(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(ApplyDefaultsTest, ACommandJobGetsNoneOfTheBuiltinTrainersDefaults) {
  v1::JobSpec spec = CommandSpec();
  ApplyDefaults(&spec);
  EXPECT_FALSE(spec.trainer().has_optimizer());
  EXPECT_FALSE(spec.trainer().has_data());
  EXPECT_EQ(spec.restart().max_restarts(), 3);  // the job's own defaults still apply
  EXPECT_EQ(spec.watchdog().straggler_threshold(), 1.2);
}

TEST(ApplyDefaultsTest, KeepsValuesTheUserSet) {
  v1::JobSpec spec;
  spec.mutable_trainer()->set_builtin("gpt");
  v1::OptimizerSpec* o = spec.mutable_trainer()->mutable_optimizer();
  o->set_lr(1e-3);
  o->set_warmup_steps(7);
  o->set_weight_decay(0.01);
  o->set_clip_grad_norm(0.5);
  o->set_min_lr(5e-4);
  o->set_beta1(0.8);
  o->set_beta2(0.99);
  o->set_epsilon(1e-6);
  spec.mutable_checkpoint()->set_keep(7);
  spec.mutable_restart()->set_max_restarts(9);
  spec.mutable_watchdog()->set_straggler_threshold(2.5);
  spec.mutable_watchdog()->set_link_check_bytes(123);
  spec.mutable_watchdog()->set_slow_link_ratio(0.1);
  spec.mutable_watchdog()->set_auto_link_check_interval_seconds(15);
  spec.mutable_trainer()->mutable_data()->set_seed(42);
  spec.mutable_trainer()->set_steps(99);
  const v1::JobSpec before = spec;
  ApplyDefaults(&spec);
  EXPECT_TRUE(MessageDifferencer::Equals(before, spec)) << spec.DebugString();
}

TEST(ApplyDefaultsTest, IsIdempotent) {
  for (v1::JobSpec spec : {v1::JobSpec(), ValidSpec(), CommandSpec()}) {
    if (spec.trainer().has_command()) {
      ApplyDefaults(&spec);
      const v1::JobSpec once = spec;
      ApplyDefaults(&spec);
      EXPECT_TRUE(MessageDifferencer::Equals(once, spec)) << spec.DebugString();
      continue;
    }
    spec.mutable_trainer()->set_builtin("gpt");
    spec.mutable_trainer()->mutable_optimizer()->set_lr(2e-4);
    spec.mutable_trainer()->mutable_optimizer()->clear_min_lr();
    ApplyDefaults(&spec);
    const v1::JobSpec once = spec;
    ApplyDefaults(&spec);
    EXPECT_TRUE(MessageDifferencer::Equals(once, spec)) << once.DebugString() << "\nvs\n"
                                                        << spec.DebugString();
    EXPECT_DOUBLE_EQ(spec.trainer().optimizer().min_lr(), 2e-5);
  }
}

// A zero the user set is a value, not "unset": no warmup, no weight decay, no clipping, cosine
// decay to zero, no momentum, seed 0, no restart.
TEST(ApplyDefaultsTest, ASetZeroIsKept) {
  v1::JobSpec spec;
  spec.mutable_trainer()->set_builtin("gpt");
  spec.mutable_trainer()->set_steps(1000);
  v1::OptimizerSpec* o = spec.mutable_trainer()->mutable_optimizer();
  o->set_lr(1e-3);
  o->set_warmup_steps(0);
  o->set_weight_decay(0);
  o->set_clip_grad_norm(0);
  o->set_min_lr(0);
  o->set_beta1(0);
  o->set_beta2(0);
  spec.mutable_trainer()->mutable_data()->set_seed(0);
  spec.mutable_restart()->set_max_restarts(0);
  ApplyDefaults(&spec);
  EXPECT_EQ(spec.restart().max_restarts(), 0);
  EXPECT_EQ(spec.trainer().optimizer().warmup_steps(), 0);
  EXPECT_EQ(spec.trainer().optimizer().weight_decay(), 0);
  EXPECT_EQ(spec.trainer().optimizer().clip_grad_norm(), 0);
  EXPECT_EQ(spec.trainer().optimizer().min_lr(), 0);
  EXPECT_EQ(spec.trainer().optimizer().beta1(), 0);
  EXPECT_EQ(spec.trainer().optimizer().beta2(), 0);
  EXPECT_EQ(spec.trainer().data().seed(), 0u);
  EXPECT_TRUE(spec.trainer().data().has_seed());
}

TEST(ApplyDefaultsTest, MinLrDefaultFollowsLr) {
  v1::JobSpec spec = ValidSpec();
  EXPECT_DOUBLE_EQ(spec.trainer().optimizer().min_lr(), 3e-5);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
}

}  // namespace
}  // namespace ringmaster::coordinator
