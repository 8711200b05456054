#include "spec/command_line.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::spec {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(CommandLineTest, ProgramNameIsThePathsLastComponent) {
  EXPECT_EQ(ProgramName("/usr/bin/python3"), "python3");
  EXPECT_EQ(ProgramName("env"), "env");
  EXPECT_EQ(ProgramName("./run.sh"), "run.sh");
  EXPECT_EQ(ProgramName("/dir/"), "");
}

TEST(CommandLineTest, EnvsAssignmentsThenItsCommand) {
  const EnvCommand env = ReadEnvCommand({"/usr/bin/env", "A=1", "B=x=y", "python3", "-u", "C=2"});
  EXPECT_TRUE(env.ok);
  EXPECT_FALSE(env.clears);
  EXPECT_THAT(env.assigned, ElementsAre("A", "B"));
  EXPECT_THAT(env.command, ElementsAre("python3", "-u", "C=2"));
  EXPECT_EQ(env.command_index, 3);
  EXPECT_THAT(ReadEnvCommand({"env"}).command, IsEmpty());
  EXPECT_EQ(ReadEnvCommand({"env", "A=1"}).command_index, -1);
}

TEST(CommandLineTest, EnvsOptionsAsCoreutilsReadsThem) {
  // Clusters; -u, -C and -S take the rest of the word or the next one.
  EnvCommand env = ReadEnvCommand({"env", "-iuPYTHONPATH", "-C", "/d", "-0v", "-u", "X", "t"});
  EXPECT_TRUE(env.ok);
  EXPECT_TRUE(env.clears);
  EXPECT_THAT(env.unset, ElementsAre("PYTHONPATH", "X"));
  EXPECT_THAT(env.command, ElementsAre("t"));
  EXPECT_EQ(env.command_index, 7);
  // Long options, = or the next word, any unique prefix; the signal ones' optional argument
  // only after =.
  env = ReadEnvCommand({"env", "--unset=A", "--uns", "B", "--ch=/d", "--ignore-e", "--block-signal",
                        "--default-signal=PIPE", "python3"});
  EXPECT_TRUE(env.ok);
  EXPECT_TRUE(env.clears);
  EXPECT_THAT(env.unset, ElementsAre("A", "B"));
  EXPECT_THAT(env.command, ElementsAre("python3"));
  // "--" ends the options; "-" right after them is -i.
  env = ReadEnvCommand({"env", "--", "-", "A=1", "-x"});
  EXPECT_TRUE(env.ok && env.clears);
  EXPECT_THAT(env.command, ElementsAre("-x"));
  env = ReadEnvCommand({"env", "-", "python3"});
  EXPECT_TRUE(env.clears);
  EXPECT_THAT(env.command, ElementsAre("python3"));
}

TEST(CommandLineTest, EnvsSplitStringIsReadInItsPlace) {
  // A #! line's one argument: its options are read as options, its words as the command.
  EnvCommand env = ReadEnvCommand({"/usr/bin/env", "-S -i A=1  python3\t-E", "t.py"});
  EXPECT_TRUE(env.ok && env.clears);
  EXPECT_THAT(env.assigned, ElementsAre("A"));
  EXPECT_THAT(env.command, ElementsAre("python3", "-E", "t.py"));
  EXPECT_EQ(env.command_index, -1);  // from the string
  env = ReadEnvCommand({"env", "--split-string", "python3 -u", "t.py"});
  EXPECT_THAT(env.command, ElementsAre("python3", "-u", "t.py"));
}

TEST(CommandLineTest, LinesEnvRefuses) {
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {"env", "-u"},                    // no name
           {"env", "--chdir"},               // no directory
           {"env", "-x", "python3"},         // no such option
           {"env", "--i", "python3"},        // ignore-environment or ignore-signal
           {"env", "--frobnicate", "python3"},
           {"env", "--null=1", "python3"},   // takes no argument
       }) {
    const EnvCommand env = ReadEnvCommand(argv);
    EXPECT_FALSE(env.ok) << argv[1];
  }
  // --help and --version run nothing.
  EXPECT_THAT(ReadEnvCommand({"env", "--help", "python3"}).command, IsEmpty());
  EXPECT_THAT(ReadEnvCommand({"env", "--vers", "python3"}).command, IsEmpty());
}

}  // namespace
}  // namespace ringmaster::spec
