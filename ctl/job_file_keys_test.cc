#include "ctl/job_file_keys.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::ctl {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Names(const std::vector<const JobFileKey*>& keys) {
  std::vector<std::string> names;
  for (const JobFileKey* k : keys) names.emplace_back(k->name());
  return names;
}

TEST(JobFileKeysTest, EveryRowResolvesUnderAMappingDeclaredBeforeIt) {
  std::set<std::string> seen;
  for (const JobFileKey& key : JobFileKeys()) {
    SCOPED_TRACE(std::string(key.key));
    EXPECT_TRUE(seen.insert(std::string(key.key)).second) << "listed twice";
    if (!key.parent().empty()) {
      EXPECT_TRUE(seen.count(std::string(key.parent()))) << "its mapping comes later or is missing";
    }
    ASSERT_NE(KeyField(key), nullptr);
    EXPECT_FALSE(RelativeFieldPath(key).empty());
    EXPECT_FALSE(key.doc.empty());
    EXPECT_EQ(FindJobFileKey(key.key), &key);
    EXPECT_EQ(key.names.empty(), key.kind != KeyKind::kEnum) << "names are for enums only";
  }
  EXPECT_EQ(FindJobFileKey("trainer.nodes"), nullptr);
  EXPECT_EQ(RelativeFieldPath(*FindJobFileKey("trainer.command")).size(), 2u);  // command.argv
}

void CollectFields(const Descriptor* message, const std::string& prefix, int depth,
                   std::vector<std::string>* paths) {
  ASSERT_LT(depth, 8) << "JobSpec is not expected to nest this deep (recursive message?)";
  for (int i = 0; i < message->field_count(); ++i) {
    const FieldDescriptor* field = message->field(i);
    const std::string path = absl::StrCat(prefix, field->name());
    paths->push_back(path);
    if (field->message_type() != nullptr && !field->is_map()) {
      CollectFields(field->message_type(), path + ".", depth + 1, paths);
    }
  }
}

TEST(JobFileKeysTest, EveryJobSpecFieldHasAKeyOrIsLeftOutOnPurpose) {
  std::vector<std::string> fields;
  CollectFields(v1::JobSpec::descriptor(), "", 0, &fields);
  std::set<std::string> left_out;
  for (absl::string_view f : FieldsNotInJobFile()) left_out.insert(std::string(f));
  for (const std::string& path : fields) {
    bool covered = left_out.count(path) > 0;
    for (const JobFileKey& key : JobFileKeys()) {
      // The key's own field, or a message on its way (trainer.command on trainer.command.argv).
      if (key.field == path || absl::StartsWith(key.field, path + ".")) covered = true;
    }
    EXPECT_TRUE(covered) << "v1::JobSpec field " << path
                         << " has no key in the job file: add a row to ctl/job_file_keys.cc, or "
                            "list it in FieldsNotInJobFile() with the reason";
  }
  for (const std::string& path : left_out) {
    EXPECT_NE(std::find(fields.begin(), fields.end(), path), fields.end())
        << path << " is left out but is no field of JobSpec";
  }
}

// The key list at the top of ctl/job_yaml.h, without the comment marks.
std::vector<std::string> HeaderKeyList() {
  std::ifstream in("ctl/job_yaml.h");
  EXPECT_TRUE(in.good()) << "cannot read ctl/job_yaml.h";
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::string> list;
  bool in_list = false;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    if (absl::StrContains(line, "JobFileKeyOutline()")) {
      in_list = true;
      continue;
    }
    if (!in_list) continue;
    if (!absl::StartsWith(line, "//  ")) break;
    list.emplace_back(line.substr(2));
  }
  return list;
}

TEST(JobFileKeysTest, TheHeaderListsExactlyTheTablesKeys) {
  const std::vector<std::string> want = absl::StrSplit(JobFileKeyOutline(), '\n');
  EXPECT_EQ(HeaderKeyList(), want)
      << "ctl/job_yaml.h's key list should read:\n//" << absl::StrJoin(want, "\n//");
  EXPECT_EQ(want.size(), JobFileKeys().size());
  for (const std::string& line : want) EXPECT_LE(line.size() + 2, 100u) << line;
}

TEST(JobFileKeysTest, TheOutlineIndentsByLevelAndNamesTheKind) {
  const std::string outline = JobFileKeyOutline();
  EXPECT_THAT(outline, HasSubstr("\n  nodes (integer): "));
  EXPECT_THAT(outline, HasSubstr("\n    tensor (integer): "));
  EXPECT_THAT(outline, HasSubstr("\n      lr (number): "));
  EXPECT_THAT(outline, HasSubstr("\n    precision (fp32 | bf16): "));
  EXPECT_THAT(outline, HasSubstr("\n    hang_timeout (auto | seconds): "));
}

TEST(JobFileKeysTest, MappingsListTheirKeysInTableOrder) {
  EXPECT_THAT(Names(ChildKeys("")),
              ElementsAre("name", "nodes", "min_nodes", "devices_per_node", "spares",
                          "elastic_batch", "elastic_warmup_steps", "elastic_wait", "parallelism",
                          "trainer", "checkpoint", "restart", "watchdog"));
  EXPECT_THAT(Names(ChildKeys("checkpoint")),
              ElementsAre("dir", "every_steps", "keep", "max_consecutive_failures"));
  EXPECT_TRUE(ChildKeys("trainer.env").empty());  // A map: its keys are the user's.
  EXPECT_TRUE(ChildKeys("nodes").empty());
}

TEST(JobFileKeysTest, EveryKeyIsSuggestedForItsMistypedCase) {
  for (const JobFileKey& key : JobFileKeys()) {
    const std::string typed = absl::AsciiStrToUpper(key.name());
    EXPECT_EQ(UnknownKeyMessage(typed, key.parent()),
              absl::StrCat("unknown key, did you mean \"", key.name(), "\"?"))
        << key.key;
  }
}

TEST(JobFileKeysTest, EveryKeyIsSuggestedFromAnotherMapping) {
  std::vector<absl::string_view> mappings = {""};
  for (const JobFileKey& key : JobFileKeys()) {
    if (key.kind == KeyKind::kMapping) mappings.push_back(key.key);
  }
  for (const JobFileKey& key : JobFileKeys()) {
    for (absl::string_view parent : mappings) {
      if (parent == key.parent()) continue;
      const std::vector<std::string> there = Names(ChildKeys(parent));
      if (std::find(there.begin(), there.end(), key.name()) != there.end()) continue;
      const std::string message = UnknownKeyMessage(key.name(), parent);
      EXPECT_THAT(message, HasSubstr("unknown key here, did you mean "))
          << key.key << " in " << parent;
      EXPECT_THAT(message, HasSubstr(std::string(key.key))) << key.key << " in " << parent;
    }
  }
}

TEST(JobFileKeysTest, NothingCloseListsTheMappingsKeys) {
  EXPECT_EQ(UnknownKeyMessage("colour", "restart"),
            "unknown key (expected one of: max_restarts, window_minutes)");
  EXPECT_EQ(UnknownKeyMessage("data", ""),
            "unknown key here, did you mean parallelism.data or trainer.data?");
  EXPECT_EQ(UnknownKeyMessage("max_restart", "trainer"),
            "unknown key here, did you mean restart.max_restarts?");
}

TEST(JobFileKeysTest, OneofsAndEnumsAreNamedFromTheTable) {
  EXPECT_EQ(OneofKeyNames(*FindJobFileKey("trainer.builtin")), "builtin or command");
  EXPECT_EQ(OneofKeyNames(*FindJobFileKey("trainer.command")), "builtin or command");
  EXPECT_EQ(OneofKeyNames(*FindJobFileKey("trainer.steps")), "");
  EXPECT_EQ(EnumNameList(*FindJobFileKey("trainer.precision")), "fp32 or bf16");
  EXPECT_EQ(EnumNameList(*FindJobFileKey("trainer.attention")), "fused or materialized");
}

TEST(JobFileKeysTest, OnlyMappingsOfMappingsAreWrittenAsBlocks) {
  for (const JobFileKey& key : JobFileKeys()) {
    if (key.kind != KeyKind::kMapping) continue;
    EXPECT_EQ(WrittenAsBlock(key), key.key == "trainer") << key.key;
  }
}

TEST(JobFileKeysTest, KeyIsSetFollowsPresence) {
  v1::JobSpec spec;
  const JobFileKey& nodes = *FindJobFileKey("nodes");
  const JobFileKey& restart = *FindJobFileKey("restart");
  EXPECT_FALSE(KeyIsSet(nodes, spec));
  EXPECT_FALSE(KeyIsSet(restart, spec));
  spec.set_nodes(2);
  spec.mutable_restart();
  EXPECT_TRUE(KeyIsSet(nodes, spec));
  EXPECT_TRUE(KeyIsSet(restart, spec));  // Present though empty.

  v1::RestartSpec r;
  const JobFileKey& max_restarts = *FindJobFileKey("restart.max_restarts");
  EXPECT_FALSE(KeyIsSet(max_restarts, r));
  r.set_max_restarts(0);
  EXPECT_TRUE(KeyIsSet(max_restarts, r));  // Presence: a set 0 is set.

  v1::OptimizerSpec o;
  const JobFileKey& lr = *FindJobFileKey("trainer.optimizer.lr");
  o.set_lr(-0.0);
  EXPECT_TRUE(KeyIsSet(lr, o));  // -0.0 is not zero to proto3.

  v1::TrainerSpec t;
  const JobFileKey& command = *FindJobFileKey("trainer.command");
  const JobFileKey& builtin = *FindJobFileKey("trainer.builtin");
  EXPECT_FALSE(KeyIsSet(command, t));
  EXPECT_EQ(Holder(command, t), nullptr);
  t.set_builtin("");
  EXPECT_TRUE(KeyIsSet(builtin, t));  // A oneof case that is selected, though empty.
  EXPECT_FALSE(KeyIsSet(command, t));
  google::protobuf::Message* holder = MutableHolder(command, &t);
  EXPECT_EQ(holder, t.mutable_command());
  EXPECT_TRUE(KeyIsSet(command, t));
  EXPECT_FALSE(KeyIsSet(builtin, t));
}

}  // namespace
}  // namespace ringmaster::ctl
