// The job file's error messages: each names the file, line, column, field and rule; every
// problem is reported, in document order; no input, however cut, escapes as an exception.
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "ctl/job_yaml.h"
#include "ctl/job_yaml_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::ctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using ::ringmaster::ctl::yaml_testing::Lines;
using ::ringmaster::ctl::yaml_testing::Message;
using ::ringmaster::ctl::yaml_testing::ReadTestFile;

TEST(JobYamlTest, HeaderExampleMessageExactly) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobYaml(R"(name: gpt
nodes: 1
devices_per_node: 2
trainer:
  builtin: gpt
  batch:
    micro_batch: four
    global_batch: 8
)",
                                                  "job.yaml");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(spec),
            "job.yaml:7:5: trainer.batch.micro_batch: expected an integer, got \"four\"");
}

TEST(JobYamlTest, CollectsEveryProblemInDocumentOrder) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobYaml(R"(name: gpt
nodse: 1
devices_per_node: many
trainer:
  builtin: gpt
  steps: 1.5
  precision: fp16
)",
                                                  "job.yaml");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Lines(spec),
              ElementsAre("job.yaml:2:1: nodse: unknown key, did you mean \"nodes\"?",
                          "job.yaml:3:1: devices_per_node: expected an integer, got \"many\"",
                          "job.yaml:6:3: trainer.steps: expected an integer, got \"1.5\"",
                          "job.yaml:7:3: trainer.precision: expected fp32 or bf16, got \"fp16\""));
}

struct ErrorCase {
  std::string name;
  std::string yaml;
  // The whole message must contain this (file:line:col, field and rule).
  std::string expected;
};

std::ostream& operator<<(std::ostream& os, const ErrorCase& c) { return os << c.name; }

class ErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ErrorTest, NamesFileLineColumnAndField) {
  const ErrorCase& c = GetParam();
  absl::StatusOr<v1::JobSpec> spec = ParseJobYaml(c.yaml, "job.yaml");
  ASSERT_FALSE(spec.ok()) << c.yaml;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(spec), HasSubstr(c.expected));
  EXPECT_THAT(Message(spec), ::testing::StartsWith("job.yaml:"));
}

INSTANTIATE_TEST_SUITE_P(
    Errors, ErrorTest,
    ::testing::ValuesIn(std::vector<ErrorCase>{
        // Wrong scalar types.
        {"WordForInteger", "trainer:\n  batch: {micro_batch: four, global_batch: 8}\n",
         "job.yaml:2:11: trainer.batch.micro_batch: expected an integer, got \"four\""},
        {"FractionForInteger", "nodes: 2.5\n",
         "job.yaml:1:1: nodes: expected an integer, got \"2.5\""},
        {"ExponentForInteger", "trainer: {steps: 1e3}\n",
         "trainer.steps: expected an integer, got \"1e3\""},
        {"WordForNumber", "trainer:\n  optimizer:\n    lr: fast\n",
         "job.yaml:3:5: trainer.optimizer.lr: expected a number, got \"fast\""},
        {"BoolForNumber", "watchdog: {straggler_threshold: true}\n",
         "watchdog.straggler_threshold: expected a number, got \"true\""},
        // Ranges of the integer types.
        {"Int32Overflow", "nodes: 3000000000\n",
         "job.yaml:1:1: nodes: out of range [-2147483648, 2147483647], got 3000000000"},
        {"Int32Underflow", "parallelism: {tensor: -2147483649}\n",
         "job.yaml:1:15: parallelism.tensor: out of range [-2147483648, 2147483647], got "
         "-2147483649"},
        {"Int64Overflow", "trainer: {steps: 9223372036854775808}\n",
         "trainer.steps: out of range [-9223372036854775808, 9223372036854775807], got "
         "9223372036854775808"},
        {"NegativeSeed", "trainer: {data: {seed: -1}}\n",
         "trainer.data.seed: out of range [0, 18446744073709551615], got -1"},
        {"SeedOverflow", "trainer: {data: {seed: 18446744073709551616}}\n",
         "trainer.data.seed: out of range [0, 18446744073709551615], got 18446744073709551616"},
        {"DoubleOverflow", "trainer: {optimizer: {lr: 1e999}}\n",
         "trainer.optimizer.lr: out of range for a double, got 1e999"},
        // Mapping where a scalar is expected, and the reverse.
        {"MappingForInteger", "nodes: {count: 2}\n",
         "job.yaml:1:1: nodes: expected an integer, got a mapping"},
        {"ListForString", "name: [a, b]\n", "name: expected a string, got a list"},
        {"ScalarForMapping", "parallelism: 4\n",
         "job.yaml:1:1: parallelism: expected a mapping, got \"4\""},
        {"ListForMapping", "trainer:\n  - builtin: gpt\n",
         "job.yaml:1:1: trainer: expected a mapping, got a list"},
        {"StringForCommand", "trainer:\n  command: python3 train.py --foo\n",
         "job.yaml:2:3: trainer.command: expected a list of strings (argv), got \"python3 "
         "train.py --foo\" (write it as [python3, train.py, --foo])"},
        {"MappingInCommand", "trainer:\n  command: [python3, {a: b}]\n",
         "job.yaml:2:22: trainer.command[1]: expected a string, got a mapping"},
        {"ListForEnvValue", "trainer:\n  env:\n    FOO: [1, 2]\n",
         "job.yaml:3:5: trainer.env.FOO: expected a string, got a list"},
        {"ListForEnv", "trainer:\n  env: [FOO=1]\n",
         "job.yaml:2:3: trainer.env: expected a mapping, got a list"},
        {"ListAsKey", "? [a, b]\n: 1\n", "job.yaml:1:3: expected a key name, got a list"},
        // Enumerations.
        {"UnknownPrecision", "trainer:\n  precision: fp16\n",
         "job.yaml:2:3: trainer.precision: expected fp32 or bf16, got \"fp16\""},
        {"UnknownAttention", "trainer:\n  attention: flash\n",
         "job.yaml:2:3: trainer.attention: expected fused or materialized, got \"flash\""},
        {"UnknownElasticBatch", "elastic_batch: local\n",
         "job.yaml:1:1: elastic_batch: expected global or per_replica, got \"local\""},
        {"ElasticWaitNotANumber", "elastic_wait: 30s\n",
         "job.yaml:1:1: elastic_wait: expected a number, got \"30s\""},
        {"UnknownHangTimeout", "watchdog:\n  hang_timeout: soon\n",
         "job.yaml:2:3: watchdog.hang_timeout: expected auto or a number of seconds, got "
         "\"soon\""},
        {"BuiltinAndCommand", "trainer:\n  builtin: gpt\n  command: [python3]\n",
         "job.yaml:3:3: trainer.command: set builtin or command, not both"},
        {"CommandAndBuiltin", "trainer:\n  command: [python3]\n  builtin: gpt\n",
         "job.yaml:3:3: trainer.builtin: set builtin or command, not both"},
        // Unknown keys.
        {"Typo", "trainer:\n  batch: {micro_bach: 4}\n",
         "job.yaml:2:11: trainer.batch.micro_bach: unknown key, did you mean \"micro_batch\"?"},
        {"Transposition", "restart: {max_retsarts: 2}\n",
         "restart.max_retsarts: unknown key, did you mean \"max_restarts\"?"},
        {"WrongCase", "Nodes: 2\n", "job.yaml:1:1: Nodes: unknown key, did you mean \"nodes\"?"},
        {"WrongLevel", "steps: 200\n",
         "job.yaml:1:1: steps: unknown key here, did you mean trainer.steps?"},
        {"WrongLevelTwoPlaces", "data: 2\n",
         "data: unknown key here, did you mean parallelism.data or trainer.data?"},
        {"NearMissAtWrongLevel", "trainer: {max_restart: 2}\n",
         "trainer.max_restart: unknown key here, did you mean restart.max_restarts?"},
        {"NothingClose", "colour: blue\n",
         "colour: unknown key (expected one of: name, nodes, min_nodes, devices_per_node, "
         "spares, elastic_batch, elastic_warmup_steps, elastic_wait, parallelism, trainer, "
         "checkpoint, restart, watchdog)"},
        // Duplicates.
        {"DuplicateKey", "nodes: 1\nname: a\nnodes: 2\n",
         "job.yaml:3:1: nodes: duplicate key (first at line 1)"},
        {"DuplicateEnv", "trainer:\n  env:\n    A: 1\n    A: 2\n",
         "job.yaml:4:5: trainer.env.A: duplicate key (first at line 3)"},
        // Documents.
        {"SyntaxError", "name: gpt\ntrainer: {builtin: gpt\n", "job.yaml:3:1: invalid YAML: "},
        {"BadIndentation", "trainer:\n  builtin: gpt\n steps: 3\n", "job.yaml:3:"},
        {"TopLevelList", "- name: gpt\n",
         "job.yaml:1:1: expected a mapping of job keys (name, nodes, trainer, ...), got a list"},
        {"TopLevelScalar", "gpt\n", "expected a mapping of job keys"},
        {"TwoDocuments", "name: a\n---\nname: b\n",
         "job.yaml:3:1: a job file holds one YAML document, found 2"},
        {"Empty", "", "job.yaml: empty job file"},
        {"OnlyComments", "# nothing here\n", "job.yaml: empty job file"},
        {"DeepNesting", std::string(100000, '[') + std::string(100000, ']'), "invalid YAML"},
        // Found by fuzz/job_yaml_fuzz: yaml-cpp 0.7's LoadAll never returned on these (endless
        // empty documents, memory growing), and strings that are not UTF-8 were accepted into
        // the spec, which then could not be sent.
        {"NoProgress", ",", "job.yaml:1:1: invalid YAML: nothing can be read from here"},
        {"NoProgressAfterComment", "# c\n,#", "job.yaml:2:1: invalid YAML: "},
        {"NotUtf8", "name: \"a\xff\"\n", "job.yaml:1:1: name: expected UTF-8 text, got \"a\\xff\""},
        {"EnvNameNotUtf8", "trainer:\n  env: {\"\xc3\": x}\n",
         "job.yaml:2:9: trainer.env: expected a UTF-8 variable name, got \"\\xc3\""},
    }),
    [](const ::testing::TestParamInfo<ErrorCase>& info) { return info.param.name; });

TEST(JobYamlTest, NeverThrowsOnTruncatedInput) {
  // Every prefix of a real job file either parses or returns an error; nothing escapes.
  const std::string text = ReadTestFile("ctl/testdata/design_example.yaml") +
                           "  env: {A: \"x\\ty\", 'B': [1]}\n  command: [a, {b: c}]\n";
  int failures = 0;
  for (size_t n = 0; n <= text.size(); ++n) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobYaml(text.substr(0, n), "cut.yaml");
    if (!spec.ok()) {
      ++failures;
      EXPECT_THAT(Message(spec), ::testing::StartsWith("cut.yaml")) << n;
    }
  }
  EXPECT_GT(failures, 0);
}

}  // namespace
}  // namespace ringmaster::ctl
