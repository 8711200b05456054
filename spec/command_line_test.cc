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

TEST(CommandLineTest, EnvsSplitStringQuotesEscapesAndComments) {
  auto split = [](const std::string& s) { return ReadEnvCommand({"env", "-S", s}); };
  EXPECT_THAT(split("'a b' \"c\\\"d\" e\\_f\tg").command,
              ElementsAre("a b", "c\"d", "e", "f", "g"));
  EXPECT_THAT(split("\"x\\_y\" '' z # a comment").command, ElementsAre("x y", "", "z"));
  EXPECT_THAT(split("p\\nq${HOME}/r a#b").command, ElementsAre("p\nq${HOME}/r", "a#b"));
  EXPECT_THAT(split("run \\c ignored").command, ElementsAre("run"));
  EXPECT_THAT(split("-u 'PYTHONPATH' python3").unset, ElementsAre("PYTHONPATH"));
  for (const std::string& refused : {"'open", "\"open", "a\\", "a\\q", "$HOME", "\"\\c\""}) {
    EXPECT_FALSE(split(refused).ok) << refused;
  }
}

TEST(CommandLineTest, EnvsArgv0TakesAWord) {
  const EnvCommand env = ReadEnvCommand({"env", "--argv0=x", "-a", "y", "python3"});
  EXPECT_TRUE(env.ok);
  EXPECT_THAT(env.command, ElementsAre("python3"));
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

TEST(CommandLineTest, TheProgramPastWrappers) {
  std::vector<std::string> command;
  EXPECT_EQ(ProgramOf({"A=1", "B_2=x", "nohup", "python3", "t.py"}, &command), 3);
  EXPECT_THAT(command, ElementsAre("python3", "t.py"));
  // Options that take an argument (attached, the next word, in a cluster), then operands.
  EXPECT_EQ(ProgramOf({"time", "-ao", "log", "timeout", "--signal", "KILL", "-k5", "1h",
                       "stdbuf", "-oL", "--error=0", "taskset", "-c", "0-3", "numactl",
                       "--membind", "0", "-N1", "nice", "-n", "5", "setsid", "exec", "-a",
                       "name", "command", "-p", "env", "X=1", "prog", "arg"},
                      &command),
            29);
  EXPECT_THAT(command, ElementsAre("prog", "arg"));
  EXPECT_EQ(ProgramOf({"/usr/bin/env", "-S", "nohup python3 -u", "t.py"}, &command), 0);
  EXPECT_THAT(command, ElementsAre("python3", "-u", "t.py"));
  EXPECT_EQ(ProgramOf({"env", "-u", "X", "nohup", "python3"}, &command), 4);
  EXPECT_EQ(ProgramOf({"python3", "t.py"}, &command), 0);
  EXPECT_THAT(command, ElementsAre("python3", "t.py"));
  // Nothing runs.
  for (const std::vector<std::string>& words : std::vector<std::vector<std::string>>{
           {"command", "-v", "torchrun"},
           {"taskset", "-p", "3", "42"},
           {"numactl", "--show"},
           {"timeout", "--help"},
           {"nohup"},
           {"timeout", "1h"},
           {"A=1"},
           {"env", "--bogus", "python3"},
           {},
       }) {
    EXPECT_EQ(ProgramOf(words, &command), -1) << (words.empty() ? "" : words[0]);
  }
  // A word with = that is no NAME=VALUE is the program.
  EXPECT_EQ(ProgramOf({"./a=b", "x"}, &command), 0);
}

TEST(CommandLineTest, AShellsSimpleCommands) {
  using Commands = std::vector<std::pair<int, std::vector<std::string>>>;
  EXPECT_EQ(ShellCommands({"/bin/bash", "-lc", "cd /d && A=1 'torchrun' t.py; echo \"x y\""}),
            (Commands{{2, {"cd", "/d"}}, {2, {"A=1", "torchrun", "t.py"}}, {2, {"echo", "x y"}}}));
  // Separators and blanks inside quotes; redirections and their targets; reserved words.
  EXPECT_EQ(ShellCommands({"sh", "-c",
                           "pip list | grep -E 'torch|deepspeed' 2>&1 >/dev/null; "
                           "if [ -n \"$X\" ]; then python3 -c \"print('a; b')\" &> log; fi"}),
            (Commands{{2, {"pip", "list"}},
                      {2, {"grep", "-E", "torch|deepspeed"}},
                      {2, {"[", "-n", "$X", "]"}},
                      {2, {"python3", "-c", "print('a; b')"}}}));
  EXPECT_EQ(ShellCommands({"bash", "-c", "run > out.txt 2> err\\ file.txt x\\ y"}),
            (Commands{{2, {"run", "x y"}}}));
  // Options: o takes the next word, in a cluster too; the string is the first operand; a
  // string that runs "$@" runs the words after $0.
  EXPECT_EQ(ShellCommands({"bash", "-euo", "pipefail", "-c", "exec \"$@\"", "bash", "p", "x"}),
            (Commands{{4, {"exec", "$@"}}, {6, {"p", "x"}}}));
  EXPECT_EQ(ShellCommands({"bash", "-c", "--", "a b"}), (Commands{{3, {"a", "b"}}}));
  EXPECT_THAT(ShellCommands({"bash", "run.sh", "torchrun"}), IsEmpty());  // a script: not read
  EXPECT_THAT(ShellCommands({"bash", "-c"}), IsEmpty());
  EXPECT_THAT(ShellCommands({"python3", "-c", "print(1)"}), IsEmpty());
  EXPECT_THAT(ShellCommands({}), IsEmpty());
}

bool RunsProg(const std::vector<std::string>& command) {
  return !command.empty() && command[0] == "prog";
}

TEST(CommandLineTest, WhereACommandRunsAProgram) {
  EXPECT_EQ(CommandRunning({"prog", "x"}, RunsProg), 0);
  EXPECT_EQ(CommandRunning({"nohup", "prog"}, RunsProg), 1);
  EXPECT_EQ(CommandRunning({"sh", "-e", "-c", "set -x; exec prog"}, RunsProg), 3);
  EXPECT_EQ(CommandRunning({"sh", "-c", "echo prog"}, RunsProg), -1);
  EXPECT_EQ(CommandRunning({"other", "prog"}, RunsProg), -1);
  // A shell behind wrappers, a shell in a shell, "$@".
  EXPECT_EQ(CommandRunning({"env", "A=1", "nohup", "bash", "-c", "prog"}, RunsProg), 5);
  EXPECT_EQ(CommandRunning({"timeout", "1d", "bash", "-lc", "if x; then prog; fi"}, RunsProg), 4);
  EXPECT_EQ(CommandRunning({"bash", "-c", "bash -c 'nice prog'"}, RunsProg), 2);
  EXPECT_EQ(CommandRunning({"sh", "-c", "exec \"$@\"", "sh", "prog"}, RunsProg), 4);
  EXPECT_EQ(CommandRunning({"sh", "-c", "echo $1", "sh", "prog"}, RunsProg), -1);
  EXPECT_EQ(CommandRunning({"bash", "run.sh", "prog"}, RunsProg), -1);
  EXPECT_EQ(CommandRunning({"bash", "-c", "echo x >prog; cat <prog"}, RunsProg), -1);
}

TEST(CommandLineTest, NestingIsReadOnlySoDeep) {
  // More than 16 levels are not read: the work on a request stays bounded (100,000 words of
  // env, as a request of a few hundred kilobytes may hold, read in a moment).
  std::vector<std::string> deep(16, "nohup");
  deep.push_back("prog");
  EXPECT_EQ(CommandRunning(deep, RunsProg), 16);
  deep.insert(deep.begin(), "nohup");
  EXPECT_EQ(CommandRunning(deep, RunsProg), -1);
  std::vector<std::string> envs(100000, "env");
  envs.push_back("prog");
  EXPECT_EQ(CommandRunning(envs, RunsProg), -1);
  auto shells = [](int levels) {  // sh -c 'exec "$@"' sh sh -c 'exec "$@"' sh ... prog
    std::vector<std::string> argv;
    for (int i = 0; i < levels; ++i) argv.insert(argv.end(), {"sh", "-c", "exec \"$@\"", "sh"});
    argv.push_back("prog");
    return argv;
  };
  EXPECT_EQ(CommandRunning(shells(4), RunsProg), 4);  // the outer shell's "$@" words
  EXPECT_EQ(CommandRunning(shells(20), RunsProg), -1);
}

}  // namespace
}  // namespace ringmaster::spec
