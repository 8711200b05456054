// -o yaml: block style, every zero printed (rank 0 shows), strings YAML would misread quoted, and
// the text reads back as the same values.
#include "ctl/proto_yaml.h"

#include "ctl/golden.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ringmaster/v1/coordinator.pb.h"
#include "yaml-cpp/yaml.h"

namespace ringmaster::ctl {
namespace {

v1::ListNodesResponse Nodes() {
  v1::ListNodesResponse nodes;
  v1::NodeStatus* n = nodes.add_nodes();
  n->set_name("agent-0");
  n->set_device_kind("cpu");
  n->set_devices(2);
  n->set_alive(true);
  n->add_jobs("job-0001");
  v1::NodeStatus* odd = nodes.add_nodes();
  odd->set_name("123");  // a string YAML would read as a number
  odd->mutable_cordon()->set_reason("true");
  return nodes;
}

TEST(ProtoYamlTest, BlockStyleWithZerosIsGolden) {
  v1::GetJobResponse job;
  job.mutable_job()->set_job_id("job-0001");
  job.mutable_job()->set_state(v1::JOB_STATE_RUNNING);
  v1::RankAssignment* a = job.mutable_job()->add_assignments();
  a->set_rank(0);
  a->set_node("agent-0");
  job.mutable_job()->add_assignments()->set_rank(1);
  const std::string yaml = ProtoToYaml(job);
  EXPECT_THAT(yaml, ::testing::HasSubstr("\n    - rank: 0\n      node: agent-0\n")) << yaml;
  ExpectGolden(yaml, "get_job.yaml");
  ExpectGolden(ProtoToYaml(Nodes()), "nodes.yaml");
}

TEST(ProtoYamlTest, ReadsBackAsTheSameValues) {
  const YAML::Node nodes = YAML::Load(ProtoToYaml(Nodes()))["nodes"];
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0]["devices"].as<int>(), 2);
  EXPECT_EQ(nodes[0]["devices_in_use"].as<int>(), 0);
  EXPECT_EQ(nodes[0]["jobs"][0].as<std::string>(), "job-0001");
  EXPECT_EQ(nodes[1]["name"].Tag(), "!") << "\"123\" stays a string (quoted)";
  EXPECT_EQ(nodes[1]["cordon"]["reason"].Tag(), "!");
  EXPECT_FALSE(nodes[1]["cordon"].IsNull());
  EXPECT_FALSE(nodes[0]["cordon"].IsDefined()) << "an unset message is left out";
}

TEST(ProtoYamlTest, StringsReadBackExactly) {
  // The job file's writer's rules (ctl/yaml_scalar.h): control characters, hex-looking text and
  // document markers are quoted too.
  v1::ListNodesResponse nodes;
  const std::string names[] = {"0x1F", "---", "\r", "stuck\r", "tab\there", ".inf", "-.5"};
  for (const std::string& name : names) nodes.add_nodes()->set_name(name);
  const std::string yaml = ProtoToYaml(nodes);
  const YAML::Node read = YAML::Load(yaml)["nodes"];
  ASSERT_EQ(read.size(), std::size(names)) << yaml;
  for (size_t i = 0; i < std::size(names); ++i) {
    EXPECT_EQ(read[i]["name"].Tag(), "!") << names[i] << "\n" << yaml;
    EXPECT_EQ(read[i]["name"].as<std::string>(), names[i]) << yaml;
  }
}

}  // namespace
}  // namespace ringmaster::ctl
