#include "ctl/job_yaml.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ctl/job_file_keys.h"
#include "ctl/job_yaml_test_util.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace ringmaster::ctl {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using ::ringmaster::ctl::yaml_testing::Lines;
using ::ringmaster::ctl::yaml_testing::Message;
using ::ringmaster::ctl::yaml_testing::ReadTestFile;

// spec -> YAML -> spec must give back an equal spec.
void ExpectRoundTrip(const v1::JobSpec& spec) {
  const std::string yaml = JobSpecToYaml(spec);
  absl::StatusOr<v1::JobSpec> back = ParseJobYaml(yaml, "roundtrip.yaml");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_TRUE(MessageDifferencer::Equals(spec, *back)) << "yaml:\n"
                                                       << yaml << "\nwant:\n"
                                                       << spec.DebugString() << "\ngot:\n"
                                                       << back->DebugString();
  // Writing is stable: the spec read back writes the same text.
  EXPECT_EQ(JobSpecToYaml(*back), yaml);
}

// A spec with every key of the job file set (builtin trainer).
v1::JobSpec FullSpec() {
  v1::JobSpec spec;
  spec.set_name("gpt-full");
  spec.set_nodes(3);
  spec.set_min_nodes(1);
  spec.set_spares(1);
  spec.set_elastic_batch(v1::ELASTIC_BATCH_PER_REPLICA);
  spec.set_elastic_warmup_steps(20);
  spec.set_elastic_wait_seconds(30);
  spec.set_devices_per_node(8);
  spec.mutable_parallelism()->set_tensor(4);
  spec.mutable_parallelism()->set_pipeline(2);
  spec.mutable_parallelism()->set_data(3);
  v1::TrainerSpec* t = spec.mutable_trainer();
  t->set_builtin("gpt");
  t->mutable_model()->set_layers(12);
  t->mutable_model()->set_d_model(768);
  t->mutable_model()->set_heads(12);
  t->mutable_model()->set_seq_len(1024);
  t->mutable_model()->set_vocab(50257);
  t->mutable_batch()->set_micro_batch(8);
  t->mutable_batch()->set_global_batch(480);
  t->set_steps(5000000000);  // Beyond int32: steps is int64.
  v1::OptimizerSpec* o = t->mutable_optimizer();
  o->set_lr(6e-4);
  o->set_warmup_steps(700);
  o->set_weight_decay(0.1);
  o->set_clip_grad_norm(1.0);
  o->set_min_lr(6e-5);
  o->set_beta1(0.9);
  o->set_beta2(0.95);
  o->set_epsilon(1e-8);
  t->set_precision(v1::PRECISION_FP32);
  t->set_attention(v1::ATTENTION_MATERIALIZED);
  t->set_zero_stage(2);
  t->mutable_data()->set_path("/data/fineweb/train_000001.bin");
  t->mutable_data()->set_seed(18446744073709551615ull);
  (*t->mutable_env())["NCCL_DEBUG"] = "INFO";
  (*t->mutable_env())["OMP_NUM_THREADS"] = "4";
  spec.mutable_checkpoint()->set_dir("/ckpt/gpt-full");
  spec.mutable_checkpoint()->set_every_steps(100);
  spec.mutable_checkpoint()->set_keep(5);
  spec.mutable_checkpoint()->set_max_consecutive_failures(2);
  spec.mutable_restart()->set_max_restarts(10);
  spec.mutable_restart()->set_window_minutes(720);
  spec.mutable_watchdog()->set_hang_timeout_seconds(600.5);
  spec.mutable_watchdog()->set_init_timeout_seconds(1800);
  spec.mutable_watchdog()->set_checkpoint_timeout_seconds(5400.25);
  spec.mutable_watchdog()->set_straggler_threshold(1.25);
  spec.mutable_watchdog()->set_link_check_disabled(true);
  spec.mutable_watchdog()->set_link_check_bytes(1 << 20);
  spec.mutable_watchdog()->set_slow_link_ratio(0.25);
  spec.mutable_watchdog()->set_min_link_bytes_per_second(2.5e10);
  spec.mutable_watchdog()->set_auto_link_check_disabled(true);
  spec.mutable_watchdog()->set_auto_link_check_interval_seconds(30);
  spec.mutable_watchdog()->set_python_watch_disabled(true);
  return spec;
}

TEST(JobYamlTest, DesignExampleParsesToExpectedValues) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobYaml(ReadTestFile("ctl/testdata/design_example.yaml"), "design_example.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "gpt-small");
  EXPECT_EQ(spec->nodes(), 2);
  EXPECT_EQ(spec->devices_per_node(), 4);
  EXPECT_EQ(spec->parallelism().tensor(), 2);
  EXPECT_EQ(spec->parallelism().pipeline(), 2);
  EXPECT_EQ(spec->parallelism().data(), 2);
  const v1::TrainerSpec& t = spec->trainer();
  EXPECT_EQ(t.program_case(), v1::TrainerSpec::kBuiltin);
  EXPECT_EQ(t.builtin(), "gpt");
  EXPECT_EQ(t.model().layers(), 4);
  EXPECT_EQ(t.model().d_model(), 128);
  EXPECT_EQ(t.model().heads(), 4);
  EXPECT_EQ(t.model().seq_len(), 64);
  EXPECT_EQ(t.model().vocab(), 256);
  EXPECT_EQ(t.batch().micro_batch(), 4);
  EXPECT_EQ(t.batch().global_batch(), 64);
  EXPECT_EQ(t.steps(), 200);
  EXPECT_EQ(t.optimizer().lr(), 3.0e-4);
  EXPECT_EQ(t.optimizer().warmup_steps(), 20);
  EXPECT_EQ(t.optimizer().weight_decay(), 0.1);
  EXPECT_EQ(t.optimizer().clip_grad_norm(), 1.0);
  EXPECT_FALSE(t.optimizer().has_min_lr());  // Defaults are the coordinator's (ApplyDefaults).
  EXPECT_EQ(t.precision(), v1::PRECISION_BF16);
  EXPECT_EQ(t.attention(), v1::ATTENTION_UNSPECIFIED);
  EXPECT_EQ(t.zero_stage(), 1);
  EXPECT_EQ(t.data().path(), "...");  // The example's placeholder, taken literally.
  EXPECT_FALSE(t.data().has_seed());
  EXPECT_TRUE(t.env().empty());
  EXPECT_EQ(spec->checkpoint().dir(), "/var/lib/ringmaster/ckpt/gpt-small");
  EXPECT_EQ(spec->checkpoint().every_steps(), 50);
  EXPECT_EQ(spec->checkpoint().keep(), 3);
  EXPECT_EQ(spec->restart().max_restarts(), 5);
  EXPECT_TRUE(spec->has_watchdog());
  EXPECT_EQ(spec->watchdog().hang_timeout_seconds(), 0);  // auto
  EXPECT_EQ(spec->watchdog().straggler_threshold(), 1.2);

  ExpectRoundTrip(*spec);
}

TEST(JobYamlTest, CommandTrainerAndEnv) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobYaml(R"(name: torch-job
nodes: 1
devices_per_node: 2
trainer:
  command: ["python3", "train.py", "--foo", 0.5, --bar=1]
  steps: 10
  env: {NCCL_DEBUG: INFO, OMP_NUM_THREADS: 4, EMPTY: "", UNSET:}
)",
                                                  "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->trainer().program_case(), v1::TrainerSpec::kCommand);
  EXPECT_THAT(spec->trainer().command().argv(),
              ElementsAre("python3", "train.py", "--foo", "0.5", "--bar=1"));
  EXPECT_EQ(spec->trainer().env().at("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(spec->trainer().env().at("OMP_NUM_THREADS"), "4");
  EXPECT_EQ(spec->trainer().env().at("EMPTY"), "");
  EXPECT_EQ(spec->trainer().env().at("UNSET"), "");
  EXPECT_EQ(spec->trainer().env().size(), 4u);
  ExpectRoundTrip(*spec);
}

TEST(JobYamlTest, EveryKeyRoundTrips) {
  ExpectRoundTrip(FullSpec());

  // The builtin trainer's program run as a command reads every key.
  v1::JobSpec command = FullSpec();
  command.mutable_trainer()->mutable_command()->add_argv("/usr/local/bin/ringmaster-trainer");
  command.mutable_trainer()->mutable_command()->add_argv("--exit_after_step=8");
  ExpectRoundTrip(command);
  // A user's command, with every key it may set.
  command.mutable_trainer()->mutable_command()->set_argv(0, "torchrun");
  command.mutable_trainer()->clear_model();
  command.mutable_trainer()->clear_batch();
  command.mutable_trainer()->clear_optimizer();
  command.mutable_trainer()->clear_precision();
  command.mutable_trainer()->clear_attention();
  command.mutable_trainer()->clear_zero_stage();
  command.mutable_trainer()->clear_data();
  ExpectRoundTrip(command);

  // Oneof cases that hold no value are kept too.
  v1::JobSpec empty_command;
  empty_command.mutable_trainer()->mutable_command();
  ExpectRoundTrip(empty_command);
  v1::JobSpec empty_builtin;
  empty_builtin.mutable_trainer()->set_builtin("");
  ExpectRoundTrip(empty_builtin);

  // A zero that is set (no warmup, decay or clipping, decay to zero, no momentum, seed 0, no
  // restart) is written and read back as set.
  v1::JobSpec zeros;
  zeros.mutable_trainer()->mutable_optimizer()->set_warmup_steps(0);
  zeros.mutable_trainer()->mutable_optimizer()->set_weight_decay(0);
  zeros.mutable_trainer()->mutable_optimizer()->set_clip_grad_norm(0);
  zeros.mutable_trainer()->mutable_optimizer()->set_min_lr(0);
  zeros.mutable_trainer()->mutable_optimizer()->set_beta1(0);
  zeros.mutable_trainer()->mutable_optimizer()->set_beta2(0);
  zeros.mutable_trainer()->mutable_data()->set_seed(0);
  zeros.mutable_restart()->set_max_restarts(0);
  EXPECT_EQ(JobSpecToYaml(zeros),
            "trainer:\n  optimizer: {warmup_steps: 0, weight_decay: 0, clip_grad_norm: 0, min_lr: 0, "
            "beta1: 0, beta2: 0}\n  data: {seed: 0}\nrestart: {max_restarts: 0}\n");
  ExpectRoundTrip(zeros);
}

// The message of `key`'s mapping in `spec` (spec itself at the top level), created as needed.
google::protobuf::Message* ParentMessage(const JobFileKey& key, v1::JobSpec* spec) {
  if (key.parent().empty()) return spec;
  const JobFileKey& mapping = *FindJobFileKey(key.parent());
  google::protobuf::Message* holder = MutableHolder(mapping, ParentMessage(mapping, spec));
  return holder->GetReflection()->MutableMessage(holder, KeyField(mapping));
}

// A spec with a value for every key of the table, built from the table alone (so a new key is
// covered without editing this test). Keys of one oneof overwrite each other: `skip_argv` leaves
// trainer.command out so that trainer.builtin stays.
v1::JobSpec EveryTableKey(bool skip_argv) {
  v1::JobSpec spec;
  int n = 0;
  for (const JobFileKey& key : JobFileKeys()) {
    if (skip_argv && key.kind == KeyKind::kArgv) continue;
    google::protobuf::Message* holder = MutableHolder(key, ParentMessage(key, &spec));
    const google::protobuf::Reflection& r = *holder->GetReflection();
    const google::protobuf::FieldDescriptor* field = KeyField(key);
    ++n;
    switch (key.kind) {
      case KeyKind::kMapping:
        r.MutableMessage(holder, field);
        break;
      case KeyKind::kString:
        r.SetString(holder, field, absl::StrCat("text-", n));
        break;
      case KeyKind::kInt32:
        r.SetInt32(holder, field, -n);
        break;
      case KeyKind::kInt64:
        r.SetInt64(holder, field, int64_t{n} << 40);
        break;
      case KeyKind::kUint64:
        r.SetUInt64(holder, field, std::numeric_limits<uint64_t>::max() - n);
        break;
      case KeyKind::kNumber:
      case KeyKind::kSecondsOrAuto:
        r.SetDouble(holder, field, n + 0.125);
        break;
      case KeyKind::kNegatedBool:
        r.SetBool(holder, field, true);
        break;
      case KeyKind::kEnum:
        r.SetEnumValue(holder, field, key.names.back().number);
        break;
      case KeyKind::kArgv:
        // The builtin trainer's program, which reads every other key of the trainer.
        r.AddString(holder, field, "trainer");
        r.AddString(holder, field, absl::StrCat("--n=", n));
        break;
      case KeyKind::kStringMap: {
        google::protobuf::Message* entry = r.AddMessage(holder, field);
        entry->GetReflection()->SetString(entry, field->message_type()->map_key(), "NAME");
        entry->GetReflection()->SetString(entry, field->message_type()->map_value(), "value");
        break;
      }
    }
  }
  return spec;
}

// Whether `key` has a value in `spec` that the writer writes.
bool Written(const JobFileKey& key, v1::JobSpec spec) {
  return KeyIsSet(key, *ParentMessage(key, &spec));
}

TEST(JobYamlTest, EveryTableKeyIsWrittenAndReadBack) {
  const v1::JobSpec with_command = EveryTableKey(/*skip_argv=*/false);
  const v1::JobSpec with_builtin = EveryTableKey(/*skip_argv=*/true);
  for (const JobFileKey& key : JobFileKeys()) {
    EXPECT_TRUE(Written(key, with_command) || Written(key, with_builtin)) << key.key;
    const std::string name = absl::StrCat(key.name(), ":");
    EXPECT_THAT(JobSpecToYaml(with_command) + JobSpecToYaml(with_builtin), HasSubstr(name));
  }
  EXPECT_TRUE(Written(*FindJobFileKey("trainer.command"), with_command));
  EXPECT_TRUE(Written(*FindJobFileKey("trainer.builtin"), with_builtin));
  ExpectRoundTrip(with_command);
  ExpectRoundTrip(with_builtin);
}

TEST(JobYamlTest, FullSpecSetsEveryKey) {
  // FullSpec (builtin) and its command variant between them set every key of the table.
  v1::JobSpec command = FullSpec();
  command.mutable_trainer()->mutable_command()->add_argv("torchrun");
  for (const JobFileKey& key : JobFileKeys()) {
    EXPECT_TRUE(Written(key, FullSpec()) || Written(key, command)) << key.key;
  }
}

TEST(JobYamlTest, UnsetFieldsAreLeftOut) {
  v1::JobSpec spec;
  spec.set_name("tiny");
  spec.mutable_trainer()->set_builtin("gpt");
  spec.mutable_trainer()->mutable_optimizer()->set_lr(0.001);
  EXPECT_EQ(JobSpecToYaml(spec),
            "name: tiny\ntrainer:\n  builtin: gpt\n  optimizer: {lr: 0.001}\n");
  ExpectRoundTrip(spec);

  ExpectRoundTrip(v1::JobSpec());
  // A present but empty message stays present.
  v1::JobSpec empty_parallelism;
  empty_parallelism.mutable_parallelism();
  ExpectRoundTrip(empty_parallelism);
}

TEST(JobYamlTest, WritesTheDesignLayout) {
  v1::JobSpec spec;
  spec.set_name("gpt-small");
  spec.set_nodes(2);
  spec.mutable_parallelism()->set_tensor(2);
  spec.mutable_trainer()->mutable_command()->add_argv("python3");
  spec.mutable_trainer()->set_steps(10);
  spec.mutable_watchdog()->set_straggler_threshold(1.2);
  spec.mutable_watchdog()->set_python_watch_disabled(true);
  EXPECT_EQ(JobSpecToYaml(spec),
            "name: gpt-small\n"
            "nodes: 2\n"
            "parallelism: {tensor: 2}\n"
            "trainer:\n"
            "  command: [python3]\n"
            "  steps: 10\n"
            "watchdog: {straggler_threshold: 1.2, python_watch: false}\n");
}

TEST(JobYamlTest, ACommandJobNeedsOnlyItsProgram) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobYaml(
      "name: torch\nnodes: 1\ndevices_per_node: 2\ntrainer:\n  command: [python3, train.py]\n",
      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->trainer().steps(), 0);
  EXPECT_FALSE(spec->trainer().has_optimizer());
  ExpectRoundTrip(*spec);
}

TEST(JobYamlTest, ACommandJobRefusesTheBuiltinTrainersKeysWhereTheyAre) {
  // In any order (model before command), every one, each at its key; an unset value (zero_stage:
  // 0, a null mapping) is no value and passes, as it would at the coordinator.
  const absl::StatusOr<v1::JobSpec> spec = ParseJobYaml(R"(name: torch
trainer:
  model: {layers: 2}
  command: [python3, train.py]
  batch: {}
  steps: 10
  optimizer: {lr: 1.0e-3}
  precision: bf16
  attention: materialized
  zero_stage: 0
  data: ~
  env: {A: "1"}
)",
                                                        "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string rule =
      ": only the builtin trainer reads it; a command job's program takes its settings from its "
      "own argv and trainer.env (remove the key, or use builtin: gpt)";
  EXPECT_THAT(Lines(spec), ElementsAre("job.yaml:3:3: trainer.model" + rule,
                                       "job.yaml:5:3: trainer.batch" + rule,
                                       "job.yaml:7:3: trainer.optimizer" + rule,
                                       "job.yaml:8:3: trainer.precision" + rule,
                                       "job.yaml:9:3: trainer.attention" + rule));

  // zero_stage and data, set; and the builtin trainer's own program may have them all.
  const std::string more = "trainer:\n  command: [python3]\n  zero_stage: 1\n  data: {seed: 0}\n";
  EXPECT_THAT(Lines(ParseJobYaml(more, "job.yaml")),
              ElementsAre("job.yaml:3:3: trainer.zero_stage" + rule,
                          "job.yaml:4:3: trainer.data" + rule));
  const absl::StatusOr<v1::JobSpec> trainer = ParseJobYaml(
      "trainer:\n  command: [/opt/bin/trainer, --slow_rank=1]\n  zero_stage: 1\n"
      "  model: {layers: 2}\n  data: {seed: 0}\n",
      "job.yaml");
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ExpectRoundTrip(*trainer);
  // A builtin job, of course.
  EXPECT_TRUE(ParseJobYaml("trainer:\n  builtin: gpt\n  zero_stage: 1\n", "job.yaml").ok());
}

TEST(JobYamlTest, PythonWatchIsOnUnlessTurnedOff) {
  absl::StatusOr<v1::JobSpec> off =
      ParseJobYaml("trainer: {command: [python3, train.py]}\nwatchdog: {python_watch: false}\n",
                   "job.yaml");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_TRUE(off->watchdog().python_watch_disabled());
  ExpectRoundTrip(*off);
  absl::StatusOr<v1::JobSpec> on = ParseJobYaml("watchdog: {python_watch: true}\n", "job.yaml");
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_FALSE(on->watchdog().python_watch_disabled());
  EXPECT_THAT(Lines(ParseJobYaml("watchdog:\n  python_watch: maybe\n", "job.yaml")),
              ElementsAre("job.yaml:2:3: watchdog.python_watch: expected true or false, got "
                          "\"maybe\""));
}

TEST(JobYamlTest, TrickyStringsRoundTrip) {
  const std::vector<std::string> tricky = {"",
                                           "null",
                                           "~",
                                           "NULL",
                                           "true",
                                           "no",
                                           "On",
                                           "123",
                                           "-4",
                                           "1.5",
                                           "1e3",
                                           ".inf",
                                           ".NaN",
                                           "0x1F",
                                           "a: b",
                                           "#hash",
                                           "a #b",
                                           "- x",
                                           "[x]",
                                           "{x}",
                                           "x, y",
                                           " lead",
                                           "trail ",
                                           "multi\nline",
                                           "tab\there",
                                           "quote\"s",
                                           "back\\",
                                           "'single'",
                                           "*ref",
                                           "&anchor",
                                           "!tag",
                                           "%percent",
                                           "@at",
                                           "`tick",
                                           "|",
                                           ">",
                                           "?",
                                           "---",
                                           "...",
                                           "unicode \u00e9\u2603",
                                           "a\x01"
                                           "b",
                                           "\r",
                                           "a\rb",
                                           " \r ",
                                           "del\x7f"};
  for (const std::string& s : tricky) {
    SCOPED_TRACE(testing::Message() << "string: \"" << s << "\"");
    v1::JobSpec spec;
    spec.set_name(s);
    spec.mutable_trainer()->mutable_command()->add_argv(s);
    spec.mutable_trainer()->mutable_command()->add_argv("x");
    (*spec.mutable_trainer()->mutable_env())[s] = s;
    (*spec.mutable_trainer()->mutable_env())["K"] = s;
    spec.mutable_checkpoint()->set_dir(s);
    ExpectRoundTrip(spec);
    // data.path is the builtin trainer's.
    spec.mutable_trainer()->set_builtin(s);
    spec.mutable_trainer()->mutable_data()->set_path(s);
    ExpectRoundTrip(spec);
  }
}

TEST(JobYamlTest, StringsThatLookTypedAreQuoted) {
  // So that any YAML reader, not only ParseJobYaml, reads them back as strings.
  v1::JobSpec spec;
  spec.set_name("true");
  spec.mutable_trainer()->mutable_command()->add_argv("123");
  spec.mutable_trainer()->mutable_command()->add_argv("1.5e3");
  spec.mutable_trainer()->mutable_command()->add_argv("null");
  spec.mutable_trainer()->mutable_command()->add_argv("-.inf");
  spec.mutable_trainer()->mutable_command()->add_argv("--lr");
  spec.mutable_checkpoint()->set_dir("...");
  EXPECT_EQ(JobSpecToYaml(spec),
            "name: \"true\"\n"
            "trainer:\n"
            "  command: [\"123\", \"1.5e3\", \"null\", \"-.inf\", --lr]\n"
            "checkpoint: {dir: \"...\"}\n");
}

TEST(JobYamlTest, NumbersRoundTripExactly) {
  const double doubles[] = {0.1,
                            1.0 / 3,
                            3e-4,
                            1e-8,
                            -0.0,
                            -2.5,
                            30,
                            1e16,
                            123456789012345678.0,
                            1e300,
                            5e-324,
                            std::numeric_limits<double>::max(),
                            std::numeric_limits<double>::lowest()};
  for (double d : doubles) {
    SCOPED_TRACE(testing::Message() << "double " << d);
    v1::JobSpec spec;
    spec.mutable_trainer()->mutable_optimizer()->set_lr(d);
    spec.mutable_watchdog()->set_hang_timeout_seconds(d);
    ExpectRoundTrip(spec);
  }
  for (int64_t i : {int64_t{std::numeric_limits<int32_t>::min()},
                    int64_t{std::numeric_limits<int32_t>::max()}, int64_t{-1}}) {
    v1::JobSpec spec;
    spec.set_nodes(static_cast<int32_t>(i));
    spec.mutable_trainer()->set_zero_stage(static_cast<int32_t>(i));
    ExpectRoundTrip(spec);
  }
  v1::JobSpec spec;
  spec.mutable_trainer()->set_steps(std::numeric_limits<int64_t>::min());
  ExpectRoundTrip(spec);
  spec.mutable_trainer()->set_steps(std::numeric_limits<int64_t>::max());
  spec.mutable_trainer()->mutable_data()->set_seed(std::numeric_limits<uint64_t>::max());
  ExpectRoundTrip(spec);
}

TEST(JobYamlTest, NonFiniteDoublesAreWrittenAsYamlSpecials) {
  v1::JobSpec spec;
  spec.mutable_trainer()->mutable_optimizer()->set_lr(std::numeric_limits<double>::quiet_NaN());
  spec.mutable_trainer()->mutable_optimizer()->set_beta1(std::numeric_limits<double>::infinity());
  spec.mutable_trainer()->mutable_optimizer()->set_beta2(-std::numeric_limits<double>::infinity());
  const std::string yaml = JobSpecToYaml(spec);
  EXPECT_THAT(yaml, HasSubstr("optimizer: {lr: .nan, beta1: .inf, beta2: -.inf}"));
  absl::StatusOr<v1::JobSpec> back = ParseJobYaml(yaml, "job.yaml");
  ASSERT_TRUE(back.ok()) << back.status();
  // Parsed as written; refusing them is ValidateJobSpec's job.
  EXPECT_TRUE(std::isnan(back->trainer().optimizer().lr()));
  EXPECT_EQ(back->trainer().optimizer().beta1(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(back->trainer().optimizer().beta2(), -std::numeric_limits<double>::infinity());
}

TEST(JobYamlTest, NumberForms) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobYaml(R"(
nodes: "4"
devices_per_node: +8
trainer:
  optimizer: {lr: .5, weight_decay: 5., clip_grad_norm: +1.5, min_lr: 1E-3, beta1: 2, beta2: -0}
watchdog: {hang_timeout: 30, straggler_threshold: 1.2e0}
)",
                                                  "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->nodes(), 4);  // A quoted number is still the number.
  EXPECT_EQ(spec->devices_per_node(), 8);
  const v1::OptimizerSpec& o = spec->trainer().optimizer();
  EXPECT_EQ(o.lr(), 0.5);
  EXPECT_EQ(o.weight_decay(), 5.0);
  EXPECT_EQ(o.clip_grad_norm(), 1.5);
  EXPECT_EQ(o.min_lr(), 1e-3);
  EXPECT_EQ(o.beta1(), 2.0);
  EXPECT_TRUE(std::signbit(o.beta2()));
  EXPECT_EQ(spec->watchdog().hang_timeout_seconds(), 30);
  EXPECT_EQ(spec->watchdog().straggler_threshold(), 1.2);
}

TEST(JobYamlTest, HangTimeoutAutoOrSeconds) {
  for (const char* text : {"auto", "AUTO", "Auto", "0"}) {
    absl::StatusOr<v1::JobSpec> spec =
        ParseJobYaml(absl::StrCat("watchdog: {hang_timeout: ", text, "}\n"), "job.yaml");
    ASSERT_TRUE(spec.ok()) << text << ": " << spec.status();
    EXPECT_EQ(spec->watchdog().hang_timeout_seconds(), 0) << text;
  }
  absl::StatusOr<v1::JobSpec> spec = ParseJobYaml("watchdog: {hang_timeout: 2.5}\n", "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->watchdog().hang_timeout_seconds(), 2.5);
}

TEST(JobYamlTest, TheLinkCheckIsTurnedOffWithFalseAndSizedInBytes) {
  for (const auto& [text, disabled] : std::vector<std::pair<std::string, bool>>{
           {"false", true}, {"FALSE", true}, {"true", false}, {"True", false}}) {
    absl::StatusOr<v1::JobSpec> spec =
        ParseJobYaml(absl::StrCat("watchdog: {link_check: ", text,
                                  ", link_check_bytes: 16777216, slow_link_ratio: 0.3, "
                                  "min_link_bytes_per_second: 2e10}\n"),
                     "job.yaml");
    ASSERT_TRUE(spec.ok()) << text << ": " << spec.status();
    EXPECT_EQ(spec->watchdog().link_check_disabled(), disabled) << text;
    EXPECT_EQ(spec->watchdog().link_check_bytes(), 16 << 20);
    EXPECT_EQ(spec->watchdog().slow_link_ratio(), 0.3);
    EXPECT_EQ(spec->watchdog().min_link_bytes_per_second(), 2e10);
    ExpectRoundTrip(*spec);
  }
  absl::StatusOr<v1::JobSpec> bad = ParseJobYaml("watchdog: {link_check: off}\n", "job.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("job.yaml:1:12: watchdog.link_check: expected true or false, got \"off\""));
  bad = ParseJobYaml("watchdog: {link_chek: false}\n", "job.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("did you mean \"link_check\"?"));
}

TEST(JobYamlTest, PrecisionIsCaseInsensitive) {
  const std::pair<const char*, v1::Precision> cases[] = {{"fp32", v1::PRECISION_FP32},
                                                         {"FP32", v1::PRECISION_FP32},
                                                         {"bf16", v1::PRECISION_BF16},
                                                         {"Bf16", v1::PRECISION_BF16},
                                                         {"BF16", v1::PRECISION_BF16}};
  for (const auto& [text, want] : cases) {
    absl::StatusOr<v1::JobSpec> spec =
        ParseJobYaml(absl::StrCat("trainer:\n  precision: ", text, "\n"), "job.yaml");
    ASSERT_TRUE(spec.ok()) << text << ": " << spec.status();
    EXPECT_EQ(spec->trainer().precision(), want) << text;
  }
}

TEST(JobYamlTest, AttentionIsCaseInsensitiveAndRoundTrips) {
  const std::pair<const char*, v1::Attention> cases[] = {
      {"fused", v1::ATTENTION_FUSED},
      {"Fused", v1::ATTENTION_FUSED},
      {"materialized", v1::ATTENTION_MATERIALIZED},
      {"MATERIALIZED", v1::ATTENTION_MATERIALIZED}};
  for (const auto& [text, want] : cases) {
    absl::StatusOr<v1::JobSpec> spec =
        ParseJobYaml(absl::StrCat("trainer:\n  attention: ", text, "\n"), "job.yaml");
    ASSERT_TRUE(spec.ok()) << text << ": " << spec.status();
    EXPECT_EQ(spec->trainer().attention(), want) << text;
    absl::StatusOr<v1::JobSpec> again = ParseJobYaml(JobSpecToYaml(*spec), "again.yaml");
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->trainer().attention(), want) << text;
  }
}

TEST(JobYamlTest, NullLeavesFieldsUnset) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobYaml(R"(name: x
nodes:
parallelism: ~
trainer:
  builtin: null
  command: [run, ~]
)",
                                                  "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->nodes(), 0);
  EXPECT_FALSE(spec->has_parallelism());
  EXPECT_THAT(spec->trainer().command().argv(), ElementsAre("run", ""));
}

}  // namespace
}  // namespace ringmaster::ctl
