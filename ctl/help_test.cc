// ringctl's help: golden texts, and the binary prints them (not Abseil's flag dump) for
// `--help`, `COMMAND --help` and `help COMMAND`.
#include "ctl/help.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "ctl/completion.h"
#include "ctl/golden.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::ctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct RunResult {
  int exit_code;
  std::string output;  // stdout and stderr
};

RunResult Ringctl(const std::string& args) {
  FILE* pipe = popen(("ctl/ringctl " + args + " 2>&1").c_str(), "r");
  RunResult run{-1, ""};
  if (pipe == nullptr) return run;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) run.output.append(buffer, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

TEST(HelpTest, MainHelpIsGolden) { ExpectGolden(MainHelp(), "help.txt"); }

TEST(HelpTest, CommandHelpsAreGolden) {
  ExpectGolden(*CommandHelpText({"submit"}), "help_submit.txt");
  ExpectGolden(*CommandHelpText({"logs"}), "help_logs.txt");
  ExpectGolden(*CommandHelpText({"get", "jobs"}), "help_get_jobs.txt");
  ExpectGolden(*CommandHelpText({"top"}), "help_top.txt");
  ExpectGolden(*CommandHelpText({"watch"}), "help_watch.txt");
}

TEST(HelpTest, EveryCommandHasHelpWithAnExample) {
  for (const CommandHelp& c : Commands()) {
    for (const std::string& flag : c.flags) EXPECT_NE(FindFlag(flag), nullptr) << flag;
    const std::optional<std::string> text = CommandHelpText(c.words);
    ASSERT_TRUE(text.has_value());
    EXPECT_THAT(*text, HasSubstr("example:\n  ringctl " + c.words[0])) << *text;
  }
  // Extra words (an id) are ignored; a prefix shows every command it starts.
  EXPECT_EQ(CommandHelpText({"get", "job", "job-0001"}), CommandHelpText({"get", "job"}));
  EXPECT_THAT(*CommandHelpText({"get"}), HasSubstr("ringctl get jobs"));
  EXPECT_THAT(*CommandHelpText({"get"}), HasSubstr("ringctl get job ID"));
  EXPECT_FALSE(CommandHelpText({"frobnicate"}).has_value());
}

TEST(HelpTest, TheBinaryPrintsOurHelpAndNoBoilerplate) {
  const RunResult main = Ringctl("--help");
  EXPECT_EQ(main.exit_code, 0);
  EXPECT_EQ(main.output, MainHelp());
  for (const char* args : {"logs --help", "help logs", "logs job-0001 -h", "--helpshort logs"}) {
    const RunResult run = Ringctl(args);
    EXPECT_EQ(run.exit_code, 0) << args;
    EXPECT_EQ(run.output, *CommandHelpText({"logs"})) << args;
  }
  // --helpfull is Abseil's list of every flag (deploy/validation reads flags from it).
  const RunResult full = Ringctl("--helpfull");
  EXPECT_THAT(full.output, HasSubstr("--coordinator"));
  EXPECT_THAT(full.output, HasSubstr("--insecure"));
  const RunResult unknown = Ringctl("frobnicate --help");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.output, HasSubstr("unknown command \"frobnicate\""));
  for (const RunResult& run : {main, unknown, Ringctl("frobnicate")}) {
    EXPECT_THAT(run.output, Not(HasSubstr("ringctl: ringctl:")));
    EXPECT_THAT(run.output, Not(HasSubstr("Try --helpfull")));
  }
}

// The completion scripts name every command and flag, and bash parses them; with a fake
// `ringctl` on PATH answering `get jobs`, completing `ringctl logs ` offers its job ids.
TEST(CompletionTest, BashCompletesCommandsFlagsAndJobIds) {
  const std::optional<std::string> bash = CompletionScript("bash");
  ASSERT_TRUE(bash.has_value());
  for (const CommandHelp& c : Commands()) EXPECT_THAT(*bash, HasSubstr(c.words[0]));
  EXPECT_THAT(*CompletionScript("zsh"), HasSubstr("bashcompinit"));
  EXPECT_FALSE(CompletionScript("fish").has_value());
  const std::string dir = std::getenv("TEST_TMPDIR");
  std::ofstream(dir + "/ringctl.bash") << *bash;
  std::ofstream(dir + "/ringctl") << "#!/bin/sh\nprintf 'ID NAME\\njob-0007 a\\njob-0008 b\\n'\n";
  const std::string script =
      "chmod +x " + dir + "/ringctl; PATH=" + dir + ":$PATH; source " + dir + "/ringctl.bash; " +
      "c() { COMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1)); _ringctl; echo \"${COMPREPLY[*]}\"; }; "
      "c ringctl lo; c ringctl logs job-; c ringctl logs job-0007 --fol; c ringctl get j";
  std::ofstream(dir + "/complete.sh") << script;
  FILE* pipe = popen(("bash " + dir + "/complete.sh 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0) << output;
  EXPECT_EQ(output, "logs\njob-0007 job-0008\n--follow\njobs job\n");
}

}  // namespace
}  // namespace ringmaster::ctl
