// The standby table's matching (same job and program, oldest first), its fallbacks (none left,
// another program) and its cleanup (a job's, everything, the standbys that ended).
#include "agent/standby_table.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

const std::vector<std::string> kTrainer = {"/opt/trainer"};
const std::vector<std::string> kOther = {"/opt/other-trainer"};

TEST(StandbyTableTest, ALaunchTakesTheJobsStandbysOfItsProgramOldestFirst) {
  StandbyTable table;
  table.Add("a", kTrainer, 10);
  table.Add("b", kTrainer, 20);
  table.Add("a", kTrainer, 11);
  EXPECT_EQ(table.Count("a", kTrainer), 2);
  EXPECT_EQ(table.Take("a", kTrainer), 10);
  EXPECT_EQ(table.Take("a", kTrainer), 11);
  EXPECT_EQ(table.Take("a", kTrainer), 0);  // none left: a normal launch
  EXPECT_EQ(table.Count("a", kTrainer), 0);
  EXPECT_THAT(table.All(), ElementsAre(std::make_pair(std::string("b"), 20)));
}

TEST(StandbyTableTest, AnotherProgramOrJobFindsNoStandby) {
  StandbyTable table;
  table.Add("a", kTrainer, 10);
  EXPECT_EQ(table.Take("a", kOther), 0);
  EXPECT_EQ(table.Take("c", kTrainer), 0);
  EXPECT_THAT(table.DropOthers("a", kOther), ElementsAre(10));
  EXPECT_THAT(table.All(), IsEmpty());
}

TEST(StandbyTableTest, DropsAJobsStandbysAndEveryOne) {
  StandbyTable table;
  table.Add("a", kTrainer, 10);
  table.Add("a", kOther, 12);
  table.Add("b", kTrainer, 20);
  EXPECT_THAT(table.DropOthers("a", kTrainer), ElementsAre(12));
  EXPECT_THAT(table.DropJob("a"), ElementsAre(10));
  EXPECT_THAT(table.DropJob("a"), IsEmpty());
  table.Add("c", kTrainer, 30);
  EXPECT_THAT(table.DropAll(), UnorderedElementsAre(20, 30));
  EXPECT_THAT(table.All(), IsEmpty());
}

TEST(StandbyTableTest, StandbysThatEndedAreForgotten) {
  StandbyTable table;
  table.Add("a", kTrainer, 10);
  table.Add("a", kTrainer, 11);
  table.Add("b", kTrainer, 20);
  table.KeepOnly({11});
  EXPECT_EQ(table.Take("a", kTrainer), 11);
  EXPECT_EQ(table.Take("b", kTrainer), 0);
  EXPECT_THAT(table.All(), IsEmpty());
}

}  // namespace
}  // namespace ringmaster::agent
